"""lag_training: the reference method's reward, entropy, clip fraction and grad norm against
step, one line per lag (the paper's Fig. 2, by lag instead of staleness)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from analysis.core.runs import RunSet
from analysis.figures.contract import FigureResult, Options, require, save
from analysis.figures.lag_common import REFERENCE, lag_order, lag_palette, reference_steps

TRAINING_METRICS = {
    "reward_mean": "training reward",
    "entropy_mean": "entropy (nats/token)",
    "clip_frac": "clip fraction (loss tokens)",
    "grad_norm": "grad norm (before clipping at 1.0)",
}
SMOOTH_STEPS = 5  # per-step values of one seed swing by half their range; a rolling mean shows the trend


def fig_lag_training(steps: pd.DataFrame, lags: pd.DataFrame, opts: Options,
                     note: str = "") -> FigureResult:
    """`steps`: step records of the reference method's runs; `lags`: lag_table rows of those runs (with
    `warmup_steps`). One line per lag; a root with one lag says so in its title."""
    d = steps.merge(lags[["run_id", "lag", "lag_low"]], on="run_id")
    d = d.sort_values(["run_id", "step"])
    for metric in TRAINING_METRICS:
        d[metric] = pd.to_numeric(d[metric], errors="coerce").groupby(d["run_id"]).transform(
            lambda s: s.rolling(SMOOTH_STEPS, min_periods=1).mean())
    require(not d.empty, f"no {REFERENCE} runs with a lag")
    order = lag_order(d["lag"], d["lag_low"])
    colours = lag_palette(order)
    warmup = lags.groupby("lag")["warmup_steps"].max() if "warmup_steps" in lags else {}
    fig, axes = plt.subplots(1, len(TRAINING_METRICS), figsize=(4.2 * len(TRAINING_METRICS), 3.8))
    rows = []
    for ax, (metric, label) in zip(axes, TRAINING_METRICS.items(), strict=True):
        for lag in order:
            one = d[d["lag"] == lag]
            v = one.assign(v=pd.to_numeric(one[metric], errors="coerce")).groupby("step")["v"]
            mean, n = v.mean(), v.count()
            ax.plot(mean.index, mean.values, color=colours[lag],
                    label=f"lag {lag} (n={int(one['run_id'].nunique())} seeds)")
            k = int(warmup.get(lag, 0)) if len(warmup) else 0
            if k and k in mean.index:  # where the delay queue starts to hold its own rollouts
                ax.plot([k], [mean[k]], marker="|", ms=12, mew=2, color=colours[lag])
            rows += [{"metric": metric, "lag": lag, "step": s, "mean": m, "n": int(n[s])}
                     for s, m in mean.items()]
        ax.set_title(label, fontsize=10)
        ax.set_ylabel(label, fontsize=9)
        ax.set_xlabel("step (rollouts trained on)")
        if metric == "grad_norm":  # rare spikes of 10-50 would flatten the rest
            ax.set_yscale("log")
    axes[0].legend(fontsize=8, title=f"{REFERENCE}, lag in optimizer updates", title_fontsize=8)
    what = (f"{REFERENCE}'s training by lag ({len(order)} lags)" if len(order) > 1
            else f"{REFERENCE}'s training at lag {order[0]} (the one lag this root ran {REFERENCE} at)")
    title = (f"{what}: rolling mean over {SMOOTH_STEPS} steps of each run, then mean over "
             "seeds. |: the end of a delay queue's warm-up (before it, the steps train on the "
             "initial weights' rollouts)" + (f"\n{note}" if note else ""))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return FigureResult("lag_training", save(fig, "lag_training", opts), pd.DataFrame(rows),
                        {"title": pd.DataFrame({"title": [title]})})


def draw(runs: RunSet, opts: Options) -> FigureResult:
    return fig_lag_training(*reference_steps(runs), opts)
