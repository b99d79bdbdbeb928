"""lag_ratios: the share of loss tokens in each IS-ratio bin, by lag and advantage sign, with
the clip range [0.8, 1.2] shaded (steady updates of the reference method)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.core.runs import RunSet
from analysis.figures.contract import FigureResult, Options, require, save
from analysis.figures.lag_common import (
    BIN_LABELS,
    REFERENCE,
    lag_order,
    lag_palette,
    reference_updates,
)


def ratio_shares(updates: pd.DataFrame) -> pd.DataFrame:
    """Per lag and sign: the share of loss tokens in each ratio bin (summed histograms)."""
    rows = []
    if "lag" not in updates:  # no runs of the kind asked for (an empty frame has no columns)
        return pd.DataFrame(rows)
    for lag, g in updates.groupby("lag", observed=True, sort=False):
        for sign, col in (("A > 0", "ratio_hist_pos"), ("A < 0", "ratio_hist_neg")):
            if col not in g:  # runs from before the drift telemetry have no histograms
                continue
            hists = [h for h in g[col] if isinstance(h, list | np.ndarray) and len(h)]
            if not hists:
                continue
            total = np.sum(np.asarray(hists, dtype=float), axis=0)
            share = total / total.sum() if total.sum() else total
            rows += [{"lag": lag, "lag_low": g["lag_low"].iloc[0], "sign": sign, "bin": b,
                      "share": float(s), "tokens": int(t)}
                     for b, s, t in zip(BIN_LABELS, share, total, strict=True)]
    return pd.DataFrame(rows)


def outside_clip(shares: pd.DataFrame) -> pd.Series:
    """Per (lag, sign): the share of tokens with r <= 0.8 or r > 1.2 (bins off [0.8, 1.2])."""
    inside = {"0.8-1", "1-1.2"}
    return shares[~shares["bin"].isin(inside)].groupby(["lag", "sign"], sort=False)["share"].sum()


def fig_lag_ratios(updates: pd.DataFrame, opts: Options, note: str = "",
                   name: str = "lag_ratios", what: str = f"steady updates of {REFERENCE}") -> FigureResult:
    d = ratio_shares(updates)
    require(not d.empty, "no ratio histograms in the update records")
    order = lag_order(d["lag"], d["lag_low"])
    colours = lag_palette(order)
    off = outside_clip(d)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    width = 0.8 / len(order)
    x = np.arange(len(BIN_LABELS))
    for ax, sign in zip(axes, ("A > 0", "A < 0"), strict=True):
        ax.axvspan(2.5, 4.5, color="#e0e0e0", zorder=0)  # bins 0.8-1 and 1-1.2
        for i, lag in enumerate(order):
            one = d[(d["lag"] == lag) & (d["sign"] == sign)].set_index("bin").reindex(BIN_LABELS)
            ax.bar(x + (i - (len(order) - 1) / 2) * width, one["share"], width,
                   color=colours[lag],
                   label=f"lag {lag}: {off.get((lag, sign), np.nan):.1%} outside")
        ax.set_yscale("log")
        ax.set_xticks(x, BIN_LABELS, fontsize=8)
        ax.set_xlabel("IS ratio r = pi / pi_old (bins)")
        ax.set_title(f"{sign}: share of loss tokens per bin (shaded: inside [0.8, 1.2])",
                     fontsize=9)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("share of tokens (log scale)")
    fig.suptitle(f"IS ratios by lag and advantage sign ({what})"
                 + (f"\n{note}" if note else ""), fontsize=10)
    fig.tight_layout()
    return FigureResult(name, save(fig, name, opts), d)


def draw(runs: RunSet, opts: Options, name: str = "lag_ratios",
         what: str = f"steady updates of {REFERENCE}") -> FigureResult:
    return fig_lag_ratios(reference_updates(runs), opts, name=name, what=what)
