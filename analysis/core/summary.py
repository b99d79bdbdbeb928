"""One row of headline numbers per run; the report and the figures share these definitions."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.core.cells import one_update_budget
from analysis.core.entropy_law import drift_of
from analysis.core.final import WINDOW_COLS, final_window, updates_per_step
from analysis.core.grad_clip import grad_clip_share
from analysis.core.loader import RUN_COLS, RunSet
from analysis.core.search_outcomes import searches_bounds

# Step metrics averaged over all of a run's complete steps.
MEAN_OVER_STEPS = {
    "clip_frac": "clip_frac",
    "clip_low_frac": "clip_low_frac",
    "clip_high_frac": "clip_high_frac",
    "pos_contrib": "contrib_grad_pos_share",
    "token_share_neg": "token_share_neg",
    "length_pos": "response_length_pos",
    "length_neg": "response_length_neg",
    "rho": "rho",
    "c_low": "c_low",
    "c_high": "c_high",
}
BAPO_ONLY = ("rho",)  # other objectives may log rho as a diagnostic; the table is about bapo


def _col(steps: pd.DataFrame, name: str) -> pd.Series:
    if name in steps.columns:
        return pd.to_numeric(steps[name], errors="coerce")
    return pd.Series(np.nan, index=steps.index)


def drift_windows(runs: RunSet, last_k: int) -> dict[str, int]:
    """Per run: how many steps each end of its entropy drift averages. `last_k`, except in a
    suite whose levels run one update budget in different step counts (the ramble testbed:
    120 steps at 1x, 30 at 4x): there each end holds the same optimizer updates at every
    level, `last_k` steps of its stalest level (5 steps x 4 updates at 4x, 20 steps at 1x),
    so that levels are compared over equal training, not over 5 updates against 20."""
    out: dict[str, int] = {}
    for suite in runs.suites:
        own = runs.select(lambda r, suite=suite: r.suite == suite)
        budgets = {(int(r.cfg("train.steps", 0) or 0), updates_per_step(r),
                    int(r.cfg("eval.every", 0) or 0)) for r in own}
        window = last_k * max(updates_per_step(r) for r in own)
        out.update({r.run_id: (window // updates_per_step(r) if one_update_budget(budgets)
                               else last_k) for r in own})
    return out


def run_summary(runs: RunSet, last_k: int = 5) -> pd.DataFrame:
    """Per run: final accuracy (mean of the last three evals, analysis/core/final.py, with where
    they fall), final reward (mean of last k steps), entropy drift (mean of
    the last window minus the first, `drift_windows`: negative = fell), the share of updates whose
    gradient norm was clipped, step-means of clip fractions, bounds and rho, and the gain of
    final accuracy over the run's step-0 eval (`with_gains`)."""
    steps = runs.steps.sort_values(["run_id", "step"])
    if steps.empty:
        return pd.DataFrame(columns=RUN_COLS)
    windows = drift_windows(runs, last_k)
    g = steps.assign(
        reward=_col(steps, "reward_mean"),
        entropy=_col(steps, "entropy_mean"),
        **{k: _col(steps, v) for k, v in MEAN_OVER_STEPS.items()},
    ).groupby("run_id", observed=True)
    tail = g.tail(last_k).groupby("run_id", observed=True)
    out = pd.DataFrame(
        {
            "final_reward": tail["reward"].mean(),
            "entropy_drift": g["entropy"].apply(lambda e: drift_of(e, windows.get(e.name, last_k))),
            **{k: g[k].mean() for k in MEAN_OVER_STEPS},
        }
    )
    table = runs.table.set_index("run_id")[RUN_COLS[1:] + ["status", "steps_used"]]
    out = table.join(out)
    out["grad_clip_share"] = grad_clip_share(runs).reindex(out.index)
    out = out.reset_index()
    bapo = {r.run_id for r in runs.select(searches_bounds)}
    for k in BAPO_ONLY:
        out.loc[~out["run_id"].isin(bapo), k] = np.nan
    out["is_bapo"] = out["run_id"].isin(bapo)
    fe = final_window(runs).set_index("run_id")
    for src, dst in (
        ("sampled_accuracy", "final_sampled_acc"),
        ("greedy_accuracy", "final_greedy_acc"),
        *((c, c) for c in WINDOW_COLS),
    ):
        out[dst] = out["run_id"].map(fe[src]) if src in fe.columns else np.nan
    return with_gains(out, runs)


def with_gains(out: pd.DataFrame, runs: RunSet) -> pd.DataFrame:
    """`gain_sampled_acc`, `gain_greedy_acc`: each run's final accuracy minus its own eval at
    step 0 (the warm start, before any update): whether the run learned at all."""
    ev = runs.evals
    for metric, col in (("sampled_accuracy", "sampled_acc"), ("greedy_accuracy", "greedy_acc")):
        start = (ev[ev["step"] == 0].groupby("run_id", observed=True)[metric].first()
                 if not ev.empty and metric in ev else pd.Series(dtype=float))
        out[f"gain_{col}"] = out[f"final_{col}"] - out["run_id"].map(start).astype(float)
    return out
