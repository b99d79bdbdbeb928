"""lag_corrections: the reference method's final accuracy by lag under each ratio anchor
(AReaL's Table 3 layout), with its on-policy mean as a reference line."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.core.runs import RunSet
from analysis.core.stats import mean_ci
from analysis.figures.contract import FigureResult, Options, require, save
from analysis.figures.lag_common import FINAL_EVALS, REFERENCE, lag_order, summary

ANCHOR_STYLE = {"coupled": ("#c62828", "o"), "recompute": ("#1565c0", "s"),
                "decoupled": ("#2e7d32", "D")}


def corrections_table(summary: pd.DataFrame, metric: str = "final_greedy_acc") -> pd.DataFrame:
    """The reference method per (lag, anchor): mean and 95% t-interval of `metric` over seeds (AReaL's
    Table 3 layout: one row per correction, one column per lag)."""
    d = summary[(summary["method"] == REFERENCE) & (summary["source"] == "delay")]
    rows = []
    for (lag, anchor), g in d.groupby(["lag", "anchor"], sort=False):
        m, lo, hi, n = mean_ci(g[metric])
        rows.append({"lag": lag, "lag_low": g["lag_low"].iloc[0], "anchor": anchor,
                     "mean": m, "low": lo, "high": hi, "n": n})
    return pd.DataFrame(rows)


def fig_lag_corrections(summary: pd.DataFrame, opts: Options, on_policy: float | None = None,
                        note: str = "") -> FigureResult:
    """Final greedy accuracy against the lag, one line per ratio anchor; the on-policy
    mean as a reference line."""
    t = corrections_table(summary)
    require(not t.empty and t["anchor"].nunique() > 1,
            f"no {REFERENCE} runs under more than one anchor (the corrections sweep)")
    order = lag_order(t["lag"], t["lag_low"])
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, anchor in enumerate(a for a in ANCHOR_STYLE if a in set(t["anchor"])):
        colour, marker = ANCHOR_STYLE[anchor]
        one = t[t["anchor"] == anchor].set_index("lag").reindex(order)
        x = np.arange(len(order)) + (i - 1) * 0.08
        ax.plot(x, one["mean"], marker=marker, color=colour,
                label=f"{anchor} (n={int(one['n'].max())} seeds)")
        ok = one["low"].notna()
        ax.vlines(x[ok.to_numpy()], one["low"][ok], one["high"][ok], color=colour, lw=1.5)
    if on_policy is not None:
        ax.axhline(on_policy, color="black", ls="--", lw=1, label=f"on-policy {REFERENCE} (lag 0)")
    ax.set_xticks(range(len(order)), [f"lag {lag}" for lag in order])
    ax.set_ylabel(f"final greedy accuracy (mean of the last {FINAL_EVALS} evals)")
    own = sorted({int(x) for x in summary.get("own_policy_steps", pd.Series(dtype=float))
                  .dropna()})
    ax.set_xlabel(f"lag in optimizer updates\n(each run: {'/'.join(map(str, own)) or 'its'} "
                  "steps on its own rollouts, after a delay's K warm-up steps)", fontsize=8)
    ax.set_title(f"{REFERENCE}'s ratio anchor against the lag (mean, 95% t-interval over seeds)"
                 + (f"\n{note}" if note else ""), fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return FigureResult("lag_corrections", save(fig, "lag_corrections", opts), t)


def on_policy(s: pd.DataFrame) -> float | None:
    """The reference method's mean final greedy accuracy at lag 0 (coupled), if it ran there."""
    on = s[(s["method"] == REFERENCE) & (s["lag"] == "0") & (s["anchor"] == "coupled")]
    return float(on["final_greedy_acc"].mean()) if len(on) else None


def draw(runs: RunSet, opts: Options) -> FigureResult:
    s = summary(runs)
    return fig_lag_corrections(s, opts, on_policy(s))
