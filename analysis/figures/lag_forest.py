"""lag_forest: paired differences against the reference method, by seed, at each lag."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.core import style
from analysis.core.grad_clip import confound_note
from analysis.core.multiplicity import holm
from analysis.core.runs import RunSet
from analysis.core.stats import mean_ci, two_sided_p
from analysis.figures.contract import FigureResult, Options, require, save
from analysis.figures.lag_common import FINAL_EVALS, REFERENCE, lag_order, summary

CLIPPED = "steady_grad_clipped"  # the share of steady updates whose gradient norm was clipped
FOREST_METRICS = {
    "final_greedy_acc": f"final greedy accuracy (last {FINAL_EVALS} evals)",
    "final_sampled_acc": f"final sampled accuracy (last {FINAL_EVALS} evals)",
    "entropy_drift": "entropy drift (last 5 - first 5 steps)",
}


def paired_rows(summary: pd.DataFrame, reference: str = REFERENCE) -> pd.DataFrame:
    """Per (lag, method != reference, metric): the per-seed differences method - reference
    over the seeds both ran, their mean and 95% t-interval, the two-sided p of the paired
    t-test and its Holm-adjusted p over every row of the table (descriptive rows, many at
    once), and a note where gradient-norm clipping binds 5 points more often on one side."""
    rows = []
    for lag, g in summary.groupby("lag", sort=False):
        ref = g[g["method"] == reference].set_index("seed")
        for method, m in g[g["method"] != reference].groupby("method"):
            m = m.set_index("seed")
            common = m.index.intersection(ref.index)
            note = (confound_note(m.loc[common, CLIPPED], ref.loc[common, CLIPPED],
                                  (method, reference)) if CLIPPED in g else "")
            for metric in FOREST_METRICS:
                d = (m.loc[common, metric] - ref.loc[common, metric]).dropna()
                mean, lo, hi, n = mean_ci(d)
                rows.append({"lag": lag, "lag_low": g["lag_low"].iloc[0], "method": method,
                             "metric": metric, "mean": mean, "low": lo, "high": hi, "n": n,
                             "per_seed": [round(float(x), 4) for x in d],
                             "p": two_sided_p(d), "note": note})
    out = pd.DataFrame(rows)
    if not out.empty:
        out.insert(out.columns.get_loc("note"), "holm_p", holm(out["p"].tolist()))
    return out


def fig_lag_forest(summary: pd.DataFrame, opts: Options, note: str = "") -> FigureResult:
    d = paired_rows(summary)
    require(not d.empty and d["n"].max() > 0, f"no method shares seeds with {REFERENCE} at any lag")
    order = lag_order(d["lag"], d["lag_low"])
    methods = style.method_order(d["method"].unique())
    colours = style.method_palette(methods)
    labels = [(lag, m) for lag in order for m in methods
              if ((d["lag"] == lag) & (d["method"] == m)).any()]
    fig, axes = plt.subplots(1, len(FOREST_METRICS), figsize=(4.4 * len(FOREST_METRICS),
                                                              1.2 + 0.38 * len(labels)),
                             sharey=True)
    for ax, (metric, title) in zip(axes, FOREST_METRICS.items(), strict=True):
        for y, (lag, m) in enumerate(labels):
            row = d[(d["lag"] == lag) & (d["method"] == m) & (d["metric"] == metric)].iloc[0]
            if row["n"] >= 2 and np.isfinite(row["low"]):
                ax.plot([row["low"], row["high"]], [y, y], color=colours[m], lw=2)
            ax.plot(row["per_seed"], [y] * len(row["per_seed"]), "o", ms=3, color=colours[m],
                    alpha=0.5)
            ax.plot([row["mean"]], [y], "D", color=colours[m], ms=6)
        ax.axvline(0, color="black", lw=0.8)
        ax.set_title(f"{title}\nmethod - {REFERENCE}, same seed", fontsize=9)
        ax.set_xlabel(f"difference, method − {REFERENCE}" + (" (share correct)" if "accuracy" in title
                                                    else " (nats/token)"), fontsize=8)
    axes[0].set_yticks(range(len(labels)), [f"{m} @ lag {lag}" for lag, m in labels], fontsize=8)
    axes[0].invert_yaxis()
    fig.suptitle(f"Paired differences against {REFERENCE} (diamond: mean; line: 95% t-interval over "
                 "seeds; dots: seeds)" + (f"\n{note}" if note else ""), fontsize=10)
    fig.tight_layout()
    return FigureResult("lag_forest", save(fig, "lag_forest", opts), d)


def draw(runs: RunSet, opts: Options) -> FigureResult:
    s = summary(runs)
    return fig_lag_forest(s[s["anchor"] == "coupled"], opts)
