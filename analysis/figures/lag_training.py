"""lag_training: the reference method's reward, entropy, clip fraction and grad norm against
step, one line per lag (the paper's Fig. 2, by lag instead of staleness)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D

from analysis.core.runs import RunSet
from analysis.figures.contract import FigureResult, Options, require, save
from analysis.figures.lag_common import REFERENCE, lag_order, lag_palette, reference_steps

TRAINING_METRICS = {
    "reward_mean": "training reward",
    "entropy_mean": "entropy (nats/token)",
    "clip_frac": "clip fraction (loss tokens)",
    "grad_norm": "grad norm (before clipping at 1.0)",
}
# per-step values of one seed swing by half their range; a rolling mean over this many
# optimizer updates (20 steps at 1x, 5 at 4x) shows the trend at every lag alike
SMOOTH_UPDATES = 20


def _prepared(steps: pd.DataFrame, lags: pd.DataFrame) -> pd.DataFrame:
    """Step records with `updates` (optimizer updates made by the end of the step: a lag
    range's width is its updates per step) and each metric's rolling mean over
    SMOOTH_UPDATES updates of the run."""
    cols = ["run_id", "lag", "lag_low", "lag_high", "warmup_steps"]
    d = steps.merge(lags[[c for c in cols if c in lags]], on="run_id").sort_values(["run_id", "step"])
    per_step = (d["lag_high"] - d["lag_low"] + 1).fillna(1).astype(int) if "lag_high" in d else 1
    d = d.assign(per_step=per_step, updates=(d["step"] + 1) * per_step)
    for metric in TRAINING_METRICS:
        value = pd.to_numeric(d[metric], errors="coerce")
        d[metric] = [x for _, g in value.groupby(d["run_id"], sort=False) for x in g.rolling(
            max(1, SMOOTH_UPDATES // int(d.loc[g.index[0], "per_step"])), min_periods=1).mean()]
    return d


def _draw_lag(ax: plt.Axes, one: pd.DataFrame, metric: str, colour, label: str,
              warm: int) -> pd.DataFrame:
    """One lag's mean line: dotted over a delay queue's warm-up (its first `warm` steps train
    on the initial weights' rollouts), solid after it, a dashed line where it ends."""
    v = one.assign(v=pd.to_numeric(one[metric], errors="coerce")).groupby("updates")["v"]
    mean, n = v.mean(), v.count()
    end = warm * int(one["per_step"].iat[0])
    steady = mean[mean.index > end]
    ax.plot(steady.index, steady.values, color=colour, lw=1.6, label=label)
    if end:
        ax.plot(mean[mean.index <= end + 1].index, mean[mean.index <= end + 1].values,
                color=colour, lw=1.2, ls=":")
        ax.axvline(end, color=colour, lw=1.2, ls="--")
    return pd.DataFrame({"metric": metric, "updates": mean.index, "mean": mean.values,
                         "n": n.values, "warm_up": mean.index <= end})


def fig_lag_training(steps: pd.DataFrame, lags: pd.DataFrame, opts: Options,
                     note: str = "") -> FigureResult:
    """`steps`: step records of the reference method's runs; `lags`: lag_table rows of those
    runs (with `warmup_steps`). One line per lag against optimizer updates (1 a step at 1x, 4
    at 4x); a root with one lag says so in its title."""
    require(not steps.empty and not lags.empty, f"no {REFERENCE} runs with a lag")
    d = _prepared(steps, lags)
    require(not d.empty, f"no {REFERENCE} runs with a lag")
    order = lag_order(d["lag"], d["lag_low"])
    colours = lag_palette(order)
    warmup = lags.groupby("lag")["warmup_steps"].max() if "warmup_steps" in lags else {}
    fig, axes = plt.subplots(1, len(TRAINING_METRICS), figsize=(4.4 * len(TRAINING_METRICS), 4.4))
    rows = []
    for ax, (metric, label) in zip(axes, TRAINING_METRICS.items(), strict=True):
        for lag in order:
            one = d[d["lag"] == lag]
            seeds = f"lag {lag} (n={int(one['run_id'].nunique())} seeds)"
            part = _draw_lag(ax, one, metric, colours[lag], seeds, int(warmup.get(lag, 0) or 0))
            rows.append(part.assign(lag=lag))
        ax.set_title(label, fontsize=10)
        ax.set_ylabel(label, fontsize=9)
        ax.set_xlabel("optimizer updates (1 a step at 1x, 4 at 4x)")
        if metric == "grad_norm":  # rare spikes of 10-50 would flatten the rest
            ax.set_yscale("log")
    handles, labels = axes[0].get_legend_handles_labels()
    handles += [Line2D([], [], color="0.4", ls=":"), Line2D([], [], color="0.4", ls="--")]
    labels += ["warm-up steps (initial weights' rollouts)", "end of the warm-up"]
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False,
               title=f"{REFERENCE}, lag in optimizer updates", title_fontsize=8)
    what = (f"{REFERENCE}'s training by lag ({len(order)} lags)" if len(order) > 1
            else f"{REFERENCE}'s training at lag {order[0]} (the one lag this root ran {REFERENCE} at)")
    title = (f"{what}, against optimizer updates: rolling mean over {SMOOTH_UPDATES} updates of "
             "each run, then mean over seeds.\nDotted, up to the dashed line of its colour: a "
             "delay queue's warm-up, whose steps train on the initial weights' rollouts"
             + (f"\n{note}" if note else ""))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.12, 1, 1))  # the legend below the panels, clear of the lines
    data = pd.concat(rows, ignore_index=True)[["metric", "lag", "updates", "mean", "n", "warm_up"]]
    return FigureResult("lag_training", save(fig, "lag_training", opts), data,
                        {"title": pd.DataFrame({"title": [title]})})


def draw(runs: RunSet, opts: Options) -> FigureResult:
    return fig_lag_training(*reference_steps(runs), opts)
