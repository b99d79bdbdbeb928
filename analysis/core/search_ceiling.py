"""BAPO's reach rate against its ceiling: what Algorithm 1 promises, read from the records.

Algorithm 1 does not promise rho >= rho0 on every update: it widens the bounds along a
fixed walk over a bounded grid and stops at the walk's last pair when no pair reaches
rho0. What it promises is that it reaches rho0 whenever its grid can. So, over a cell's
updates:

- below: updates whose rho at the start bounds is under rho0 (the search had work to do);
- unreachable: of those, the ones that ended `not reached` at the walk's last pair. Under
  the gradient reading rho only grows as c_low or c_high widens (a wider c_high admits
  positive tokens, a higher c_low drops negative ones), so the last pair of the walk, the
  widest, has the largest rho of the grid: below rho0 there means no bounds in the grid
  reach it;
- the ceiling: below minus unreachable, the share of `below` some bounds in the grid reach;
- reached: the share of `below` the search reached.

A correct search has reached == ceiling: a `not reached` update that stopped before the
walk's end is one it gave up on too early. Under the value reading rho falls as c_low
rises, the walk's last pair need not be the grid's best, and the ceiling cannot be read
from the records (`readable` False).

The walk is src/algorithms/bapo.py's: the paper's order steps c_high to its last grid value,
then c_low; the official order c_low, then c_high, each clamped to its max.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from analysis.core.loader import Run, RunSet
from analysis.core.search_outcomes import outcome, searches_bounds

_GRID_TOL = 1e-9  # the search's own tolerance on grid values (src/algorithms/bapo.py)
_MATCH_TOL = 1e-6  # logged bounds are floats written to JSON
GRID_KEYS = ("low_start", "low_max", "low_step", "high_start", "high_max", "high_step")


def _last_value(start: float, stop: float, step: float, clamp_last: bool) -> tuple[float, int]:
    """(last grid value, number of values) of start, start + step, ... <= stop."""
    count = max(0, math.floor((stop - start) / step))
    while start + (count + 1) * step <= stop + _GRID_TOL:
        count += 1
    while count > 0 and start + count * step > stop + _GRID_TOL:
        count -= 1
    last = start + count * step
    if clamp_last and last < stop - _GRID_TOL:
        return stop, count + 2
    return last, count + 1


def grid_end(run: Run) -> tuple[float, float] | None:
    """The (c_low, c_high) the run's search visits last; None when its grid parameters are
    not in its config or its rho does not grow along the walk (the value reading)."""
    params = {k: run.method_param(k) for k in GRID_KEYS}
    if any(v is None for v in params.values()):
        return None
    if str(run.method_param("contribution", "gradient")) != "gradient":
        return None
    order = str(run.method_param("order", "paper"))
    clamp = order == "official"
    low, n_low = _last_value(params["low_start"], params["low_max"], params["low_step"], clamp)
    high, _ = _last_value(params["high_start"], params["high_max"], params["high_step"], clamp)
    if order == "paper" and n_low < 2:  # the loop's guard fails at once: it never moves
        return float(params["low_start"]), float(params["high_start"])
    return low, high


def annotate(updates: pd.DataFrame, runs: RunSet) -> pd.DataFrame:
    """The not-skipped `updates` of runs that search their bounds, with `outcome`
    (search_outcomes.outcome), `ceiling_readable` and `at_grid_end` (the bounds are the
    walk's last pair) added."""
    searching = {r.run_id: r for r in runs.select(searches_bounds)}
    u = updates[updates["run_id"].isin(searching)]
    if "skipped" in u:  # a skipped update made no search
        u = u[~u["skipped"].astype("boolean").fillna(False).astype(bool)]
    if u.empty:
        return u.assign(outcome=pd.Series(dtype=str), ceiling_readable=pd.Series(dtype=bool),
                        at_grid_end=pd.Series(dtype=bool))
    parts = []
    for run_id, g in u.groupby("run_id", observed=True, sort=False):
        run = searching[run_id]
        end = grid_end(run)
        at_end = (pd.Series(False, index=g.index) if end is None else
                  ((pd.to_numeric(g["c_low"], errors="coerce") - end[0]).abs() < _MATCH_TOL)
                  & ((pd.to_numeric(g["c_high"], errors="coerce") - end[1]).abs() < _MATCH_TOL))
        parts.append(g.assign(outcome=outcome(g, run.traits), ceiling_readable=end is not None,
                              at_grid_end=at_end))
    return pd.concat(parts).loc[u.index]


@dataclass(frozen=True)
class Reach:
    """Counts over one cell's updates (annotated): see the module docstring."""

    updates: int  # with a defined search (not `undefined`)
    below: int
    reached: int  # moved and reached rho0
    unreachable: int  # not reached, at the walk's last pair
    readable: bool  # the ceiling can be read (every run: gradient reading, known grid)

    @property
    def ceiling(self) -> int:
        return self.below - self.unreachable

    @property
    def stopped_short(self) -> int:
        """Below rho0, not reached, and not at the walk's end: given up too early."""
        return self.ceiling - self.reached


def reach(updates: pd.DataFrame) -> Reach:
    """The counts of one cell from its annotated update records."""
    defined = updates[updates["outcome"] != "undefined"]
    below = defined[defined["outcome"].isin(["moved, reached", "not reached"])]
    return Reach(
        updates=len(defined),
        below=len(below),
        reached=int((below["outcome"] == "moved, reached").sum()),
        unreachable=int(((below["outcome"] == "not reached") & below["at_grid_end"]).sum()),
        readable=bool(len(updates)) and bool(updates["ceiling_readable"].all()),
    )
