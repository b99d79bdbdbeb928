"""Fig 11: final held-out accuracy per method and staleness."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from analysis.loader import RUN_COLS, RunSet
from analysis.plotting import FigureResult, Options, bar_panel, finish_legends, require, save, stx

EVAL_METRICS = {"sampled_accuracy": "sampled accuracy", "greedy_accuracy": "greedy accuracy"}


def final_evals(runs: RunSet) -> pd.DataFrame:
    """The last eval record (highest step) of every run: one row per run."""
    ev = runs.evals
    if ev.empty:
        return pd.DataFrame(columns=[*RUN_COLS, "step", *EVAL_METRICS])
    last = ev.sort_values(["run_id", "step"]).groupby("run_id", observed=True).tail(1)
    cols = [c for c in EVAL_METRICS if c in last.columns]
    return last[[*RUN_COLS, "step", *cols]].reset_index(drop=True)


def _values(values) -> str:
    found = sorted({int(v) for v in values if v is not None and v == v})
    return "/".join(map(str, found)) if found else "?"


def eval_caption(runs: RunSet, final: pd.DataFrame) -> str:
    """What the bars are: eval size, samples per problem, seeds per cell, interval type."""
    n_problems = _values(runs.evals["n_problems"]) if "n_problems" in runs.evals else "?"
    samples = _values(r.cfg("eval.samples") for r in runs.runs)
    seeds = _values(final.groupby(["method", "staleness"]).size())
    text = (f"Last eval of each run on {n_problems} held-out problems (greedy: 1 response, "
            f"sampled: {samples} per problem).\nBars: mean over {seeds} seeds; whiskers: 95% "
            "Student-t interval over seeds, clipped to [0, 1].")
    at_1x = set(final.loc[final["staleness"] == 1, "method"])
    if at_1x and set(final["method"]) - at_1x:
        text += ("\nNo 1x bar: not run at 1x, where every IS weight is 1 and a method that "
                 "only clips differently makes ppo's update (read ppo's bar).")
    return text


def fig11_final_accuracy(runs: RunSet, opts: Options) -> FigureResult:
    final = final_evals(runs)
    require(not final.empty, "no eval records")
    present = [c for c in EVAL_METRICS if c in final.columns]
    long = final.melt(id_vars=[*RUN_COLS, "step"], value_vars=present, var_name="metric").dropna(
        subset=["value"]
    )
    require(not long.empty, "no sampled_accuracy/greedy_accuracy in eval records")
    long["staleness_x"] = long["staleness"].map(stx)
    order = [stx(k) for k in sorted(long["staleness"].unique())]
    # taller with many methods, so the legend (one row per method) fits beside the panels
    height = max(3.6, 1.4 + 0.3 * long["method"].nunique())
    fig, axes = plt.subplots(1, 2, figsize=(4.5 + 1.3 * len(order), height), sharey=True)
    for ax, (metric, label) in zip(axes, EVAL_METRICS.items(), strict=True):
        # Accuracy lives in [0, 1]; with 2-3 seeds a t-interval can reach far past it.
        bar_panel(ax, long[long["metric"] == metric], "staleness_x", "value", order, runs,
                  bounds=(0.0, 1.0))
        ax.set_title(f"final {label}")
        ax.set_xlabel("staleness")
        ax.set_ylabel("held-out accuracy (share correct)")
        ax.set_ylim(0, 1)
    finish_legends(fig, axes)
    fig.suptitle(eval_caption(runs, final), fontsize=9)
    fig.tight_layout()
    name = "fig11_final_accuracy"
    return FigureResult(name, save(fig, name, opts), long.reset_index(drop=True))
