"""BAPO's bounds as distributions over updates: one histogram of c_low and one of c_high per
method and staleness, over the stale updates of every seed, with the paper's values shaded.
A mean of the bounds (Fig 8's claims) averages the grid's start and maximum when the search
keeps the one or runs to the other; the histogram shows which ends were used."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.core import style
from analysis.core.bound_limits import PAPER_HIGH_BAND, PAPER_LOW_BAND, annotated_updates
from analysis.core.loader import RunSet
from analysis.core.plotting import stx, suptitle
from analysis.figures.contract import FigureResult, Options, require, save

NAME = "fig_bapo_bound_hist"
BAND_COLOR = "#009E73"
# (column, axis label, the paper's band, its label, bin width: the search's steps are 0.02
# (c_low) and 0.05 (c_high), the official recipe's 0.05 for both)
BOUNDS = (("c_low", "c_low (lower bound)", PAPER_LOW_BAND, "paper: ~0.7", 0.02),
          ("c_high", "c_high (upper bound)", PAPER_HIGH_BAND, "paper: 1.9-2.2", 0.05))


def stale_bounds(runs: RunSet) -> pd.DataFrame:
    """The applied stale updates (1..k-1; at 1x, update 0) of bound-searching runs, with
    their c_low, c_high and positions in the grid (analysis/core/bound_limits.py)."""
    u = annotated_updates(runs)
    if u.empty:
        return u
    u = u[(u["update"] > 0) | (u["staleness"] == 1)]
    return u.assign(method=u["method"].astype(str))[
        ["run_id", "method", "staleness", "seed", "step", "update", "c_low", "c_high",
         "low_at", "high_at", "grid"]].reset_index(drop=True)


def _bins(values: pd.Series, width: float) -> np.ndarray:
    """Bins of `width` centred on the values' grid, over their range."""
    lo, hi = float(values.min()), float(values.max())
    return np.arange(lo - width / 2, hi + 1.5 * width, width)


def _panel(ax: plt.Axes, d: pd.DataFrame, col: str, label: str, band: tuple[float, float],
           band_text: str, bins: np.ndarray, colour: str) -> None:
    counts, _ = np.histogram(d[col].clip(bins[0], bins[-1]), bins)
    ax.stairs(counts / len(d), bins, fill=True, color=colour, alpha=0.75)
    ax.axvspan(band[0], band[1], color=BAND_COLOR, alpha=0.15, lw=0)
    ax.text(sum(band) / 2, 0.97, band_text, transform=ax.get_xaxis_transform(),
            color=BAND_COLOR, fontsize=8, ha="center", va="top")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel(label)
    ax.set_ylabel("share of updates")


def fig_bapo_bound_hist(runs: RunSet, opts: Options) -> FigureResult:
    rows = stale_bounds(runs)
    require(not rows.empty, "no bapo runs with c_low/c_high and their grid in the records")
    order = style.method_order(rows["method"].unique())
    cells = sorted({(m, int(k)) for m, k in zip(rows["method"], rows["staleness"], strict=True)},
                   key=lambda c: (order.index(c[0]), c[1]))
    palette = style.method_palette(runs.methods)
    fig, axes = plt.subplots(len(cells), 2, figsize=(9.0, 2.3 * len(cells) + 1.0), squeeze=False)
    bins = {col: _bins(rows[col], width) for col, *_, width in BOUNDS}
    for (method, k), pair in zip(cells, axes, strict=True):
        d = rows[(rows["method"] == method) & (rows["staleness"] == k)]
        for ax, (col, label, band, text, _) in zip(pair, BOUNDS, strict=True):
            _panel(ax, d, col, label, band, text, bins[col], palette[method])
            at = d["low_at" if col == "c_low" else "high_at"].value_counts(normalize=True)
            ax.set_title(f"{method} {stx(k)} ({d['grid'].iat[0]}): {len(d):,} updates, "
                         f"{d['seed'].nunique()} seeds\nat start {at.get('start', 0):.0%}, "
                         f"at max {at.get('max', 0):.0%}, between {at.get('between', 0):.0%}",
                         fontsize=8)
    suptitle(fig, "BAPO's bounds per update, over the stale updates (1 to k-1 of each rollout) "
             "of every seed: the share of updates in each bin (c_low 0.02 wide, c_high 0.05). A mean of these bounds "
             "averages the grid's start and its maximum; the paper's values are shaded.",
             fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 / fig.get_figheight()))
    return FigureResult(NAME, save(fig, NAME, opts), rows)
