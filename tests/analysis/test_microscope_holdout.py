"""Holdout checks (analysis/reports/microscope_holdout.py): judged on the rows their `where`
keeps, by a rule of their own, each case worked out by hand."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest

from analysis.core.cluster_bootstrap import Boot
from analysis.reports.microscope_holdout import holdout_table, outcome


def _boot(low: float, high: float, trunk_means: tuple[float, ...], n: int = 30) -> Boot:
    return Boot((low + high) / 2, low, high, 0.01, 0.1, n, len(trunk_means), trunk_means)


def test_replicated_needs_the_interval_and_every_trunk_on_the_papers_side():
    assert outcome(_boot(0.1, 0.5, (0.2, 0.4)), 1) == "replicated"
    assert outcome(_boot(-0.5, -0.1, (-0.2, -0.4)), -1) == "replicated"
    # the interval excludes 0 but one trunk's own mean has the other sign
    assert outcome(_boot(0.1, 0.5, (0.6, -0.01)), 1) == "not replicated"
    assert outcome(_boot(-0.1, 0.5, (0.2, 0.4)), 1) == "not replicated"
    assert outcome(_boot(-0.5, -0.1, (-0.2, -0.4)), 1) == "contradicted"
    assert outcome(_boot(float("nan"), float("nan"), (), n=0), 1) == "no data yet"


CHECK = {"id": "H9", "claim": "a reading", "table": "branches", "metric": "d_entropy",
         "arm": "mask:low_pos", "ref": "zero", "direction": "up", "paper": "rises",
         "expect": "replicated", "where": "seed >= 2 and minibatch_entropy >= 1.0"}


def _branches() -> pd.DataFrame:
    """4 trunks x 4 rollouts x updates 1-3; the mask's effect is +1 on trunks 2-3 at mini-batch
    entropy >= 1 (rollouts 2-3), -1 on trunks 0-1, 0 elsewhere."""
    rows = []
    for seed, rollout, update in itertools.product(range(4), range(4), (1, 2, 3)):
        entropy = 0.5 * rollout  # rollouts 2 and 3 are at 1.0 and 1.5
        effect = (1.0 if seed >= 2 else -1.0) if entropy >= 1.0 else 0.0
        for arm, value in (("zero", 0.3), ("mask:low_pos", 0.3 + effect)):
            rows.append({"experiment": "e", "trunk": "ppo", "minibatch": 8, "seed": seed,
                         "rollout": rollout, "update": update, "arm": arm, "d_entropy": value,
                         "minibatch_entropy": entropy})
    return pd.DataFrame(rows)


def test_a_check_reads_only_the_rows_its_where_keeps():
    lines = holdout_table([CHECK], {"branches": _branches()})
    # 2 trunks x 2 rollouts x 3 updates kept, each +1: trunks 0-1's -1 never enter
    assert lines[2].endswith("| +1.0000 [+1.0000, +1.0000], 12 states | 2 of 2 | replicated |")
    assert "| `seed >= 2 and minibatch_entropy >= 1.0` |" in lines[2]
    on_trunks_0_1 = {**CHECK, "where": "seed < 2 and minibatch_entropy >= 1.0"}
    assert holdout_table([on_trunks_0_1], {"branches": _branches()})[2].endswith(
        "| -1.0000 [-1.0000, -1.0000], 12 states | 0 of 2 | contradicted |")
    nothing = {**CHECK, "where": "seed >= 9"}
    assert holdout_table([nothing], {"branches": _branches()})[2].endswith(
        "| - | 0 of 0 | no data yet |")


def test_a_check_without_a_direction_is_refused():
    with pytest.raises(ValueError, match="H9: direction must be up or down"):
        holdout_table([{**CHECK, "direction": "none"}], {"branches": _branches()})


def test_a_key_a_claim_does_not_have_is_refused_not_dropped():
    with pytest.raises(TypeError, match="wher"):
        holdout_table([{**CHECK, "wher": "seed >= 2"}], {"branches": _branches()})
