"""Held-out accuracy against training step, from every eval record, with the warm start's
step-0 accuracy as a line: whether a method ever rises above where every run began.

Where the staleness levels end at one number of optimizer updates (a suite run at equal
updates: 120 steps at 1x, 30 at 4x), the x axis counts updates, so the levels' panels line
up and a 4x curve is not squeezed into a quarter of the axis; otherwise it counts steps."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from analysis.core import style
from analysis.core.final import EVAL_METRICS, FINAL_EVALS
from analysis.core.loader import RUN_COLS, RunSet
from analysis.core.plotting import step_axis, stx, suptitle, whole_number_ticks, with_updates
from analysis.core.stats import agg_ci
from analysis.figures.contract import FigureResult, Options, require, require_learning, save
from analysis.figures.final import WARM_START_STYLE, start_evals, start_label, start_name

NAME = "fig_accuracy_by_step"


def accuracy_curves(runs: RunSet) -> pd.DataFrame:
    """Per metric, method, staleness and eval step: mean over seeds (with its interval)."""
    ev = runs.evals
    present = [m for m in EVAL_METRICS if m in ev.columns]
    if ev.empty or not present:
        return pd.DataFrame(columns=["metric", "method", "staleness", "step", "mean", "n"])
    ev = with_updates(ev, runs)
    long = ev[[*RUN_COLS, "step", "updates", *present]].melt(
        id_vars=[*RUN_COLS, "step", "updates"], value_vars=present, var_name="metric")
    long["value"] = pd.to_numeric(long["value"], errors="coerce")
    return agg_ci(long.dropna(subset=["value"]),
                  ["metric", "method", "staleness", "step", "updates"], "value")


def fig_accuracy_by_step(runs: RunSet, opts: Options) -> FigureResult:
    require_learning(runs)
    curves = accuracy_curves(runs)
    require(not curves.empty, "no eval records with sampled_accuracy/greedy_accuracy")
    metrics = [m for m in EVAL_METRICS if m in set(curves["metric"])]
    levels = sorted(int(k) for k in curves["staleness"].unique())
    start, name = start_evals(runs), start_name(runs)
    line = start_label(name)
    palette = style.method_palette(runs.methods)
    x, x_label = step_axis(runs)
    fig, axes = plt.subplots(len(metrics), len(levels), squeeze=False, sharex=True,
                             sharey="row", figsize=(3.3 * len(levels) + 1.8, 2.8 * len(metrics) + 1.0))
    for i, metric in enumerate(metrics):
        for j, k in enumerate(levels):
            ax = axes[i, j]
            d = curves[(curves["metric"] == metric) & (curves["staleness"] == k)]
            for method in style.method_order(d["method"].unique()):
                m = d[d["method"] == method].sort_values(x)
                ax.plot(m[x], m["mean"], marker="o", ms=3, lw=1.2, color=palette[method],
                        label=method)
            if metric in start and start[metric] == start[metric]:
                ax.axhline(start[metric], **WARM_START_STYLE, label=line)
            ax.set_title(f"{EVAL_METRICS[metric]}, staleness {stx(k)}", fontsize=9)
            ax.set_ylabel("held-out accuracy (share correct)" if j == 0 else "")
            ax.set_xlabel(x_label if i == len(metrics) - 1 else "")
            whole_number_ticks(ax)
            ax.tick_params(labelleft=True)
    found: dict[str, object] = {}
    for ax in axes.flat:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            found.setdefault(label, h)
    labels = [*style.method_order(set(found) - {line}), line]
    fig.legend([found[x] for x in labels if x in found], [x for x in labels if x in found],
               loc="center right", frameon=False, fontsize=8)
    seeds = "/".join(str(int(n)) for n in sorted(curves["n"].unique()))
    warm = ", ".join(f"{EVAL_METRICS[m]} {start[m]:.3f}" for m in metrics if m in start)
    suptitle(fig, f"Held-out accuracy at every eval: mean over {seeds} seeds (fig11 has the "
             f"final accuracy, the mean of each run's last {FINAL_EVALS} evals, per seed and with "
             f"intervals). Dashed: {name} at step 0 ({warm}), where every run begins.",
             fontsize=9)
    fig.tight_layout(rect=(0, 0, 1 - 1.7 / fig.get_figwidth(), 1))
    return FigureResult(NAME, save(fig, NAME, opts), curves,
                        {"start": start.to_frame("step 0").T, "x": x})
