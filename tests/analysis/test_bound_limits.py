"""Where BAPO's bounds sat (analysis/core/bound_limits.py) and its histogram figure: the
shares at each end of the grid, counted by hand from bounds set on the synthetic updates."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from analysis.core.bound_limits import bound_limit_table, bound_positions
from analysis.figures import bound_hist
from analysis.figures.contract import SkipFigure

# (c_low, c_high) by row index mod 4 on the grid [0.6, 0.9] x [1.2, 3.0] (conftest's
# BAPO_RANGE): the start bounds, the maximum, the paper's values, the maximum as the search's
# float steps write it (0.6 + 15 * 0.02, 1.2 + 36 * 0.05).
PATTERN = [(0.6, 1.2), (0.9, 3.0), (0.7, 2.0), (0.6 + 15 * 0.02, 1.2 + 36 * 0.05)]


def with_pattern(runset):
    """The runset with every bapo update's bounds set by PATTERN, in row order."""
    u = runset.updates.copy()
    rows = np.flatnonzero((u["method"] == "bapo").to_numpy())
    for i, row in enumerate(rows):
        u.iloc[row, u.columns.get_loc("c_low")] = PATTERN[i % 4][0]
        u.iloc[row, u.columns.get_loc("c_high")] = PATTERN[i % 4][1]
    return dataclasses.replace(runset, updates=u), u.iloc[rows].assign(kind=np.arange(len(rows)) % 4)


def test_float_steps_land_on_the_grid_ends():
    values = pd.Series([0.6, 0.6 + 15 * 0.02, 0.75, 0.9000001, 0.61])
    assert list(bound_positions(values, 0.6, 0.9)) == ["start", "max", "between", "max", "between"]


def test_shares_at_each_end_counted_by_hand(runset):
    patterned, rows = with_pattern(runset)
    table = bound_limit_table(patterned)
    assert set(table["method"]) == {"bapo"}  # fixed-clip methods have no grid
    for _, got in table.iterrows():
        stale = rows["update"] > 0
        mine = rows[(rows["staleness"] == got["staleness"])
                    & (stale if got["updates"].startswith("1..") else ~stale)]
        n = len(mine)
        counts = mine["kind"].value_counts().reindex(range(4), fill_value=0)
        assert got["n"] == n
        assert got["grid"] == "c_low 0.6-0.9, c_high 1.2-3"
        assert got["c_low at start"] == pytest.approx(counts[0] / n)
        assert got["c_low at max"] == pytest.approx((counts[1] + counts[3]) / n)
        assert got["c_low between"] == pytest.approx(counts[2] / n)
        assert got["c_high at start"] == pytest.approx(counts[0] / n)
        assert got["c_high at max"] == pytest.approx((counts[1] + counts[3]) / n)
        assert got["c_low in 0.65-0.75"] == pytest.approx(counts[2] / n)
        assert got["c_high in 1.9-2.2"] == pytest.approx(counts[2] / n)
    # The mean the claims read (0.6, 0.9, 0.7, 0.9 in turn: about 0.775) is a c_low no
    # update used: the reason the table exists.
    assert not np.isclose(rows["c_low"], rows["c_low"].mean()).any()


def test_histogram_draws_the_stale_updates(runset, opts):
    patterned, rows = with_pattern(runset)
    res = bound_hist.fig_bapo_bound_hist(patterned, opts)
    assert res.paths[0].stat().st_size > 0
    stale = rows[rows["update"] > 0]
    assert len(res.data) == len(stale)
    assert np.allclose(np.sort(res.data["c_low"]), np.sort(stale["c_low"]))
    with pytest.raises(SkipFigure, match="no bapo runs"):
        bound_hist.fig_bapo_bound_hist(runset.subset(lambda r: r.method == "ppo"), opts)
