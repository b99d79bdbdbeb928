"""The named quantities a claim row reads from a cell's runs, one number per run (by seed).

A row names its quantity (schema.Side.quantity): a column of the run summary
(analysis/core/summary.py, core/lags.py: `final_sampled_acc`, `clip_frac`, `entropy_drift`,
...) or one of the functions below, which derive a number from such columns. Each returns
the cell's values indexed by seed, so two cells' values pair by seed.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from analysis.core.plotting import sample_note
from analysis.core.runs import Run, RunSet


def by_seed(cell: pd.DataFrame, col: str) -> pd.Series:
    """One cell's `col` indexed by seed: what paired comparisons match on."""
    if col not in cell.columns:
        return pd.Series(dtype=float)
    return cell.set_index("seed")[col].astype(float)


def negative_contribution(cell: pd.DataFrame) -> pd.Series:
    """The negative tokens' share of the loss contribution (gradient reading): the
    complement of `pos_contrib`, since only tokens with A != 0 carry any."""
    return 1.0 - by_seed(cell, "pos_contrib")


QUANTITIES: dict[str, Callable[[pd.DataFrame], pd.Series]] = {
    "negative_contribution": negative_contribution,
}


def values(cell: pd.DataFrame, quantity: str) -> pd.Series:
    """The cell's `quantity` by seed: a named function above, else a summary column."""
    fn = QUANTITIES.get(quantity)
    return fn(cell) if fn else by_seed(cell, quantity)


def ramble_task(runs: list[Run]) -> bool:
    """The runs' task makes some worked solutions searches that never stop (the ramble
    testbed: guess_check with ramble_fraction > 0)."""
    return any(float(r.cfg("task.params.ramble_fraction", 0) or 0) > 0 for r in runs)


# Where a row's Construction holds (schema.Construction.when), read from the runs' config.
CONDITIONS: dict[str, Callable[[list[Run]], bool]] = {"ramble": ramble_task}


def conditions(runs: list[Run]) -> frozenset[str]:
    """The names of CONDITIONS that hold for `runs`."""
    return frozenset(name for name, holds in CONDITIONS.items() if runs and holds(runs))


def length_cap(runs: RunSet, chosen: list[Run]) -> str:
    """Per staleness: the share of A<0 and of A>0 responses that run to the length cap
    (rollout.max_new_tokens), pooled over the seeds' token rows."""
    parts = []
    for k in sorted({r.staleness for r in chosen}):
        at = [r for r in chosen if r.staleness == k and r.token_parts]
        tok = runs.tokens(["step", "update", "response_id", "advantage", "response_length"], at)
        if tok.empty:
            continue
        cap = {r.run_id: r.cfg("rollout.max_new_tokens") for r in at}
        resp = tok.groupby(["run_id", "step", "update", "response_id"], observed=True).first()
        capped = resp["response_length"] >= resp.index.get_level_values("run_id").map(cap)
        neg, pos = capped[resp["advantage"] < 0].mean(), capped[resp["advantage"] > 0].mean()
        parts.append(f"{k}x {neg:.0%} of A<0 responses vs {pos:.0%} of A>0")
    caps = "/".join(sorted({str(r.cfg("rollout.max_new_tokens")) for r in chosen}))
    return (f"at the {caps}-token cap: {', '.join(parts)}; {sample_note(chosen)}"
            if parts else "")


# Numbers that show why a row holds by construction (schema.Construction.measure).
MEASURES: dict[str, Callable[[RunSet, list[Run]], str]] = {"length_cap": length_cap}
