"""Fig 11: final held-out accuracy (mean of each run's last three evals) per method and
staleness."""

from __future__ import annotations

import warnings

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from analysis.core import style
from analysis.core.builds import run_meta
from analysis.core.final import EVAL_METRICS, FINAL_EVALS, final_window, window_text
from analysis.core.loader import RUN_COLS, RunSet
from analysis.core.plotting import bar_panel, finish_legends, stx, suptitle
from analysis.figures.contract import FigureResult, Options, require, require_learning, save
from src.run_vocab import PACKAGE_PREFIX


def start_evals(runs: RunSet) -> pd.Series:
    """Held-out accuracy of the warm start: the mean over runs of each eval metric at step 0
    (before any update; every run starts from the same weights)."""
    ev = runs.evals
    if ev.empty or "step" not in ev:
        return pd.Series(dtype=float)
    first = ev[ev["step"] == 0]
    return first[[c for c in EVAL_METRICS if c in first.columns]].mean()


WARM_START_STYLE = {"color": "0.25", "lw": 1.0, "ls": "--"}


def start_name(runs: RunSet) -> str:
    """What every run starts from, as the figures name the step-0 line: "the released model"
    where every run records a packaged model (RL starts from its published weights), "the
    warm start" (the project's SFT build) otherwise."""
    packaged = [str(run_meta(r).get("warm_start") or "").startswith(PACKAGE_PREFIX)
                for r in runs.runs]
    return "the released model" if packaged and all(packaged) else "the warm start"


def start_label(name: str) -> str:
    """The step-0 line's legend entry for `start_name`'s `name`: "warm start (step 0)" or
    "released model (step 0)"."""
    return f"{name.removeprefix('the ')} (step 0)"


def _values(values) -> str:
    found = sorted({int(v) for v in values if v is not None and v == v})
    return "/".join(map(str, found)) if found else "?"


def eval_caption(runs: RunSet, final: pd.DataFrame) -> str:
    """What the bars are: the evals averaged, eval size, samples per problem, seeds per
    cell, interval type."""
    n_problems = _values(runs.evals["n_problems"]) if "n_problems" in runs.evals else "?"
    samples = _values(r.cfg("eval.samples") for r in runs.runs)
    seeds = _values(final.groupby(["method", "staleness"]).size())
    text = (f"Final = mean of each run's last {FINAL_EVALS} evals ({window_text(final)}, k "
            f"updates per step at kx) on {n_problems} held-out problems (greedy: 1 response, "
            f"sampled: {samples} per problem).\nBars: mean over "
            f"{seeds} seeds; dots: the seeds; whiskers: 95% Student-t interval over seeds, "
            f"clipped to [0, 1]; dashed: {start_name(runs)} (step 0), where every run begins.")
    at_1x = set(final.loc[final["staleness"] == 1, "method"])
    if at_1x and set(final["method"]) - at_1x:
        text += ("\nNo 1x bar: not run at 1x, where every IS weight is 1 and a method that "
                 "only clips differently makes ppo's update (read ppo's bar).")
    return text


def fig11_final_accuracy(runs: RunSet, opts: Options) -> FigureResult:
    require_learning(runs)
    final = final_window(runs)
    require(not final.empty, "no eval records after step 0")
    present = [c for c in EVAL_METRICS if c in final.columns]
    long = final.melt(id_vars=[*RUN_COLS, "final_eval_steps"], value_vars=present,
                      var_name="metric").dropna(subset=["value"])
    require(not long.empty, "no sampled_accuracy/greedy_accuracy in eval records")
    long["staleness_x"] = long["staleness"].map(stx)
    order = [stx(k) for k in sorted(long["staleness"].unique())]
    start, line = start_evals(runs), start_label(start_name(runs))
    # taller with many methods, so the legend (one row per method) fits beside the panels
    height = max(3.6, 1.4 + 0.3 * long["method"].nunique())
    # at least 2.6 in a panel: with one staleness, narrower panels ran their titles together
    fig, axes = plt.subplots(1, 2, figsize=(max(7.2, 4.5 + 1.3 * len(order)), height),
                             sharey=True)
    for ax, (metric, label) in zip(axes, EVAL_METRICS.items(), strict=True):
        d = long[long["metric"] == metric]
        # Accuracy lives in [0, 1]; with 2-3 seeds a t-interval can reach far past it.
        bar_panel(ax, d, "staleness_x", "value", order, runs, bounds=(0.0, 1.0))
        seed_dots(ax, d, order)
        # short lines only: side by side, long ones ran into the next panel's (the caption
        # above says how "final" is taken)
        title = f"final {label}"
        if metric in start and start[metric] == start[metric]:
            ax.axhline(start[metric], **WARM_START_STYLE, label=line)
            title += f"\nstep 0 (dashed): {start[metric]:.3f}"
        ax.legend(*ax.get_legend_handles_labels(), title="method")
        ax.set_title(title)
        ax.set_xlabel("staleness")
        ax.set_ylabel("held-out accuracy (share correct)")
    # The panels share y: scale to both (whiskers and the warm-start lines included), so
    # the first panel's range cannot cut the second's bars; never past 1.
    axes[0].autoscale(axis="y")
    axes[0].set_ylim(0, min(1.0, axes[0].get_ylim()[1]))
    finish_legends(fig, axes)
    suptitle(fig, eval_caption(runs, final), fontsize=9)
    fig.tight_layout()
    name = "fig11_final_accuracy"
    y_low, y_high = axes[0].get_ylim()
    return FigureResult(name, save(fig, name, opts), long.reset_index(drop=True),
                        {"start": start.to_frame("step 0").T,
                         "ylim": pd.DataFrame({"low": [y_low], "high": [y_high]})})


def seed_dots(ax: plt.Axes, d: pd.DataFrame, order: list[str]) -> None:
    """One dot per seed on its bar (same dodge as the bars), without a legend entry."""
    with warnings.catch_warnings():  # seaborn warns when a hue level is missing at an x
        warnings.simplefilter("ignore")
        sns.stripplot(data=d, x="staleness_x", y="value", hue="method", order=order,
                      hue_order=style.method_order(d["method"].unique()),
                      palette={m: "0.15" for m in d["method"].unique()}, dodge=True,
                      jitter=False, size=2.5, ax=ax, legend=False)
