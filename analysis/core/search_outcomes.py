"""How BAPO's bound search ended, per update: the table that says what the bounds did.

A step-mean of c_low/c_high (Fig 8) hides whether the search moved because clipping
starved the positive tokens or because the mini-batch itself held too little positive
advantage for any bounds to fix. This table counts, over the update records of the runs
whose method searches its bounds (`searches_bounds`: bapo and its ablations), which
of these happened:

- at start: rho >= rho0 with the start bounds (no search step);
- moved, reached: the search widened the bounds and reached rho0;
- not reached: the whole grid was tried and rho stayed below rho0 (bounds end at the max);
- undefined: no loss-bearing token with A != 0 (bounds stay at the start, flagged).

Update 0 of a rollout is on-policy (every ratio is 1, nothing can be clipped), so it is
counted apart from the stale updates 1..k-1.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.core.loader import Run, RunSet
from src.run_vocab import MethodTraits


def searches_bounds(run: Run) -> bool:
    """Runs whose method searches its bounds per update, step by step (bapo and its
    ablations): adaptive bounds with a record of the steps they moved. m2po's bounds are
    adaptive too but solved in one go, with no search to tabulate."""
    return run.traits.adaptive_bounds and run.traits.moved is not None


OUTCOMES = ("at start", "moved, reached", "not reached", "undefined")


def needed(traits: MethodTraits) -> tuple[str | None, ...]:
    """The update-record keys the table reads, as the method names them."""
    return (traits.moved, traits.reached, traits.measure_at_start, traits.measure, "c_low", "c_high")


def outcome(updates: pd.DataFrame, traits: MethodTraits) -> pd.Series:
    steps = pd.to_numeric(updates[traits.moved], errors="coerce").fillna(0)
    reached = updates[traits.reached].astype("boolean").fillna(False).astype(bool)
    undefined = (
        updates[traits.undefined].astype("boolean").fillna(False).astype(bool)
        if traits.undefined in updates
        else pd.Series(False, index=updates.index)
    )
    return pd.Series(
        np.select(
            [undefined, reached & (steps == 0), reached],
            ["undefined", "at start", "moved, reached"],
            default="not reached",
        ),
        index=updates.index,
    )


def search_outcomes(runs: RunSet) -> pd.DataFrame:
    """The table over every run that searches its bounds, one part per set of traits."""
    by_traits: dict[MethodTraits, set[str]] = {}
    for run in runs.select(searches_bounds):
        by_traits.setdefault(run.traits, set()).add(run.run_id)
    parts = [outcome_table(runs.updates, ids, traits) for traits, ids in by_traits.items()]
    parts = [p for p in parts if not p.empty]
    if len(parts) == 1:  # every method that searches logs the same keys (today: bapo's)
        return parts[0]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def outcome_table(u: pd.DataFrame, ids: set[str], traits: MethodTraits) -> pd.DataFrame:
    """Per cell (suite, experiment, method, staleness) and update kind: share of each
    outcome, mean rho and bounds.

    `u` holds update records with RUN_COLS; `ids` are the runs among them whose method has
    `traits` (adaptive bounds). Empty when none of them logged the search fields.
    """
    if not ids or u.empty or None in needed(traits) or not set(needed(traits)) <= set(u.columns):
        return pd.DataFrame()
    u = u[u["run_id"].isin(ids)].copy()
    if "skipped" in u:
        u = u[~u["skipped"].astype("boolean").fillna(False).astype(bool)]
    u["outcome"] = outcome(u, traits)
    u["updates"] = np.where(u["update"] == 0, "0 (on-policy)", "1..k-1 (stale)")
    rows = []
    cell = [c for c in ("suite", "experiment", "method", "staleness") if c in u.columns]
    for key, g in u.groupby([*cell, "updates"], sort=True):
        shares = g["outcome"].value_counts(normalize=True)
        rows.append(
            {
                **dict(zip(cell, key[:-1], strict=True)),
                "staleness": int(g["staleness"].iat[0]),
                "updates": key[-1],
                "n": len(g),
                **{o: float(shares.get(o, 0.0)) for o in OUTCOMES},
                "rho before": float(pd.to_numeric(g[traits.measure_at_start], errors="coerce").mean()),
                "rho after": float(pd.to_numeric(g[traits.measure], errors="coerce").mean()),
                "c_low": float(g["c_low"].mean()),
                "c_high": float(g["c_high"].mean()),
            }
        )
    return pd.DataFrame(rows)
