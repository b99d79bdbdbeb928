"""The mismatch grid's figures: the sampler-trainer gap and chi-square per step by setting,
final accuracy by method and setting, and the correction's IS weights.

Every figure reads the runs' setting (`setting_of`: rollout.precision / correction.name) and
draws the methods that have a run in a low-precision setting, never a method by name.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.claims.mismatch import setting
from analysis.core import style
from analysis.core.loader import Run, RunSet
from analysis.core.plotting import sample_note, suptitle
from analysis.core.runs import read_tokens
from analysis.core.stats import mean_ci
from analysis.figures.contract import Figure, FigureResult, Options, require, save

GAP_KEYS = {"sampler_logp_gap": "mean |log pi_old - log mu| per token",
            "rollout_corr_chi2_token": "chi-square per token, E[w^2] - 1"}
ACCURACY = {"final_sampled_acc": "final sampled accuracy (primary)",
            "final_greedy_acc": "final greedy accuracy"}
GAIN = {"final_sampled_acc": "gain_sampled_acc", "final_greedy_acc": "gain_greedy_acc"}
START_COLOR = "#7f7f7f"


def warm_start(summary: pd.DataFrame, metric: str) -> float:
    """The runs' mean eval at step 0 (final minus gain over it), before any update; NaN
    when the summary has no gain column."""
    gain = GAIN[metric]
    if gain not in summary:
        return float("nan")
    return float((summary[metric] - summary[gain]).dropna().mean())
SETTING_COLORS = {"fp32/none": "#4d4d4d", "int8/none": "#d6604d", "int8/tis": "#4393c3",
                  "int8/seq_mis": "#5aae61"}


def setting_of(run: Run) -> str:
    return setting(run.cfg("rollout.precision"), run.cfg("correction.name"))


def settings_order(names) -> list[str]:
    known = [s for s in SETTING_COLORS if s in set(names)]
    return known + sorted(set(names) - set(known))


def _color(name: str) -> str:
    return SETTING_COLORS.get(name, "#8073ac")


def _per_step(runs: RunSet) -> pd.DataFrame:
    """Each run's step record of the gap keys, with its setting."""
    keys = [k for k in GAP_KEYS if k in runs.steps.columns]
    label = {r.run_id: setting_of(r) for r in runs.runs}
    frame = runs.steps[["run_id", "step", *keys]].copy()
    frame["setting"] = frame["run_id"].map(label)
    return frame


def draw_gap(runs: RunSet, opts: Options) -> FigureResult:
    d = _per_step(runs)
    keys = [k for k in GAP_KEYS if k in d.columns and d[k].notna().any()]
    require(bool(keys), "no run logs the sampler's gap (sampler_logp_gap)")
    fig, axes = plt.subplots(1, len(keys), figsize=(5.2 * len(keys), 3.8), squeeze=False)
    rows = []
    for ax, key in zip(axes[0], keys, strict=True):
        for name in settings_order(d["setting"].dropna().unique()):
            part = d[(d["setting"] == name) & d[key].notna()]
            if part.empty:
                continue
            g = part.groupby("step")[key]
            mean, low, high = g.mean(), g.quantile(0.1), g.quantile(0.9)
            ax.plot(mean.index, mean.values, color=_color(name), label=name, lw=1.6)
            ax.fill_between(mean.index, low.values, high.values, color=_color(name), alpha=0.15)
            rows += [{"metric": key, "setting": name, "step": s, "mean": m}
                     for s, m in mean.items()]
        if key == "sampler_logp_gap":  # fp32's gap (rounding) is orders below a low precision's
            ax.set_yscale("log")
        else:  # a sample estimate of E[w^2] - 1 can fall below 0
            ax.axhline(0, color="#999999", lw=0.8)
        ax.set(xlabel="training step (rollout batches)", title=GAP_KEYS[key])
        ax.grid(alpha=0.3)
    axes[0][0].legend(title="sampler / correction", fontsize=8)
    suptitle(fig, "The sampler-trainer mismatch by setting (lines: mean over runs; bands: "
             "10th-90th percentile; chi-square is logged by runs made since the diagnostics "
             "existed, so not by the fp32 cells)")
    fig.tight_layout()
    return FigureResult("fig_mismatch_gap", save(fig, "fig_mismatch_gap", opts), pd.DataFrame(rows))


def draw_accuracy(summary: pd.DataFrame, opts: Options) -> FigureResult:
    """Final accuracy per method and setting: seeds as dots, mean and 95% interval."""
    require(not summary.empty, "no run of the mismatch grid")
    methods = style.method_order(summary["method"].unique())
    names = settings_order(summary["experiment"].unique())
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.9))
    rows = []
    width = 0.8 / max(len(names), 1)
    for ax, (metric, title) in zip(axes, ACCURACY.items(), strict=True):
        for i, method in enumerate(methods):
            for j, name in enumerate(names):
                vals = summary[(summary["method"] == method) & (summary["experiment"] == name)][metric]
                vals = vals.dropna()
                if vals.empty:
                    continue
                x = i + (j - (len(names) - 1) / 2) * width
                mean, low, high, n = mean_ci(vals)
                ax.scatter(np.full(len(vals), x), vals, s=10, color=_color(name), alpha=0.5)
                ax.errorbar([x], [mean], yerr=[[mean - low], [high - mean]] if n > 1 else None,
                            fmt="o", color=_color(name), ms=5, capsize=3,
                            label=name if i == 0 else None)
                rows.append({"metric": metric, "method": method, "setting": name, "mean": mean,
                             "low": low, "high": high, "n": n})
        start = warm_start(summary, metric)
        if not np.isnan(start):
            ax.axhline(start, color=START_COLOR, ls="--", lw=1.2,
                       label=f"warm start, step 0 ({start:.3f})")
            rows.append({"metric": metric, "method": "warm start", "setting": "step 0",
                         "mean": start, "low": np.nan, "high": np.nan, "n": len(summary)})
        ax.set_xticks(range(len(methods)), methods)
        ax.set(title=title, ylabel="accuracy")
        ax.set_ylim(0, max(summary[metric].max(), start if not np.isnan(start) else 0) * 1.1)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(title="sampler / correction", fontsize=8, loc="lower left")
    suptitle(fig, "Final accuracy by method and setting (mean of the evals at updates "
             "80/100/120; dots: seeds; bars: 95% Student-t interval); the y-axis starts at 0, "
             "the dashed line is the warm start's accuracy at step 0, before any update")
    fig.tight_layout()
    return FigureResult("fig_mismatch_accuracy", save(fig, "fig_mismatch_accuracy", opts),
                        pd.DataFrame(rows))


def draw_is_weights(runs: RunSet, opts: Options) -> FigureResult:
    """The correction's IS weights, per token: the ECDF of log w for each corrected setting."""
    parts, used = [], []
    for run in runs.runs:
        table = read_tokens(run, ["is_weight"], runs._note)  # each token once: one pass
        if table is None:
            continue
        frame = table.to_pandas()
        frame = frame[frame["is_weight"].notna()]
        if len(frame):
            parts.append(frame.assign(setting=setting_of(run)))
            used.append(run)
    require(bool(parts), "no run logs an IS weight (a correction with rollout_is)")
    d = pd.concat(parts, ignore_index=True)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    rows = []
    for name in settings_order(d["setting"].unique()):
        w = np.sort(np.log(d.loc[d["setting"] == name, "is_weight"].clip(lower=1e-12).to_numpy()))
        ax.step(w, np.arange(1, len(w) + 1) / len(w), where="post", color=_color(name),
                label=f"{name} ({len(w):,} tokens)")
        rows.append({"setting": name, "tokens": len(w), "q01": np.quantile(w, 0.01),
                     "q50": np.quantile(w, 0.5), "q99": np.quantile(w, 0.99)})
    ax.axvline(np.log(2.0), color="#999999", ls="--", lw=1)
    ax.text(np.log(2.0), 0.05, " cap 2.0", color="#666666", fontsize=8)
    ax.set(xlabel="log IS weight, log(pi_old / mu) as the correction weighs it (per token)",
           ylabel="share of tokens at or below", title="The correction's IS weights")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3)
    ax.text(0.99, 0.02, sample_note(used), transform=ax.transAxes, ha="right", fontsize=7,
            color="#666666")
    fig.tight_layout()
    return FigureResult("fig_mismatch_is_weights", save(fig, "fig_mismatch_is_weights", opts),
                        pd.DataFrame(rows))


FIGURES = (Figure("fig_mismatch_gap", draw_gap), Figure("fig_mismatch_is_weights", draw_is_weights))
