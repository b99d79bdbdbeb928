"""Where BAPO's bounds sat, update by update: the share of updates at each end of its grid.

The paper reports c_low settling near 0.7 and c_high at 1.9-2.2 (Fig 8). A mean of the
bounds over updates cannot show that here: when the search either keeps the start bounds
(c_low 0.6, c_high 1.2) or runs to the grid's maximum (0.9, 3.0), a mean of 0.7 is a mix of
the two ends, not a value any update used. This table counts, per cell and update kind, the
share of applied updates whose c_low (c_high) equals the grid's start, equals its maximum,
or lies between, and the share inside the paper's band. Updates with no token of nonzero
advantage keep the start bounds and are counted there: they ran at those bounds.
"""

from __future__ import annotations

import pandas as pd

from analysis.core.loader import RunSet
from analysis.core.search_outcomes import searches_bounds

_MATCH_TOL = 1e-6  # logged bounds are floats written to JSON (0.6 + 15 * 0.02 = 0.8999...)
# The paper's values as the claims read them (analysis/claims/paper.py: ~0.7 is 0.65-0.75).
PAPER_LOW_BAND = (0.65, 0.75)
PAPER_HIGH_BAND = (1.9, 2.2)
_POSITION_LABELS = {"start": "at start", "between": "between", "max": "at max"}
SHARES = ("c_low at start", "c_low between", "c_low at max",
          "c_high at start", "c_high between", "c_high at max",
          "c_low in 0.65-0.75", "c_high in 1.9-2.2")


def bound_positions(updates: pd.DataFrame, start: float, stop: float) -> pd.Series:
    """'start', 'max' or 'between' for each bound in `updates` (a numeric Series), given
    the grid's start and maximum."""
    at_start = (updates - start).abs() < _MATCH_TOL
    at_max = (updates - stop).abs() < _MATCH_TOL
    return pd.Series("between", index=updates.index).mask(at_start, "start").mask(at_max, "max")


def _in_band(values: pd.Series, band: tuple[float, float]) -> pd.Series:
    return (values >= band[0] - _MATCH_TOL) & (values <= band[1] + _MATCH_TOL)


def annotated_updates(runs: RunSet) -> pd.DataFrame:
    """The applied update records of runs that search their bounds, each with the position
    of its c_low and c_high in its run's grid (`low_at`, `high_at`: start/between/max) and
    `grid` ('c_low 0.6-0.9, c_high 1.2-3')."""
    chosen = {r.run_id: r for r in runs.select(searches_bounds)}
    u = runs.updates
    if not chosen or u.empty or not {"c_low", "c_high"} <= set(u.columns):
        return pd.DataFrame()
    u = u[u["run_id"].isin(chosen)]
    if "skipped" in u:
        u = u[~u["skipped"].astype("boolean").fillna(False).astype(bool)]
    parts = []
    for run_id, g in u.groupby("run_id", observed=True, sort=False):
        r = chosen[run_id]
        grid = [r.method_param(k) for k in ("low_start", "low_max", "high_start", "high_max")]
        if any(v is None for v in grid):
            continue
        lo0, lo1, hi0, hi1 = (float(v) for v in grid)
        low = pd.to_numeric(g["c_low"], errors="coerce")
        high = pd.to_numeric(g["c_high"], errors="coerce")
        parts.append(g.assign(c_low=low, c_high=high,
                              low_at=bound_positions(low, lo0, lo1),
                              high_at=bound_positions(high, hi0, hi1),
                              grid=f"c_low {lo0:g}-{lo1:g}, c_high {hi0:g}-{hi1:g}"))
    return pd.concat(parts) if parts else pd.DataFrame()


def bound_limit_table(runs: RunSet) -> pd.DataFrame:
    """Per cell (suite, experiment, method, staleness) and update kind (0 on-policy, 1..k-1
    stale): the number of updates and the share at each grid position (SHARES)."""
    u = annotated_updates(runs)
    if u.empty:
        return pd.DataFrame()
    u = u.assign(updates=u["update"].map(lambda i: "0 (on-policy)" if i == 0 else "1..k-1 (stale)"))
    cell = [c for c in ("suite", "experiment", "method", "staleness") if c in u.columns]
    rows = []
    for key, g in u.groupby([*cell, "updates"], sort=True, observed=True):
        shares = {f"{bound} {_POSITION_LABELS[p]}": float((g[col] == p).mean())
                  for bound, col in (("c_low", "low_at"), ("c_high", "high_at"))
                  for p in _POSITION_LABELS}
        shares["c_low in 0.65-0.75"] = float(_in_band(g["c_low"], PAPER_LOW_BAND).mean())
        shares["c_high in 1.9-2.2"] = float(_in_band(g["c_high"], PAPER_HIGH_BAND).mean())
        rows.append({**dict(zip(cell, key[:-1], strict=True)), "staleness": int(g["staleness"].iat[0]),
                     "updates": key[-1], "grid": " / ".join(sorted(g["grid"].unique())),
                     "n": len(g), **{k: shares[k] for k in SHARES}})
    return pd.DataFrame(rows)
