"""Eq. 6 tested per update: the covariance's predicted entropy change against the measured one."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from analysis.core import style
from analysis.core.entropy_law import (
    MEASURED,
    PREDICTED,
    has_entropy_change,
    law_by_cell,
    pearson,
    update_pairs,
)
from analysis.core.loader import RunSet
from analysis.core.plotting import grid, stx, suptitle
from analysis.core.stats import fmt_ci
from analysis.figures.contract import FigureResult, Options, require, save

NAME = "fig_entropy_law"
X_LABEL = "predicted: −Cov(log π, A·X) (nats)"
Y_LABEL = "measured entropy change (nats/token)"
AGREE_SHADE = "#2ca02c"


def panel_title(runs: RunSet, method: str, k: int) -> str:
    """'ppo 4x, clip [0.8, 1.2]'; bapo's bounds move, and at 1x no bound ever binds."""
    (run,) = runs.select(lambda r: r.method == method and r.staleness == k)[:1]
    if run.traits.adaptive_bounds:
        bounds = "adaptive bounds"
    else:
        lo, hi = run.method_param("c_low"), run.method_param("c_high")
        bounds = f"clip [{lo:g}, {hi:g}]" if lo is not None and hi is not None else ""
    if k == 1:
        bounds = f"{bounds}, never binds (control)" if bounds else "control"
    return f"{method} {stx(k)}" + (f", {bounds}" if bounds else "")


def spearman(x: pd.Series, y: pd.Series) -> float:
    """Rank (Spearman) correlation: Pearson's r of the ranks (ties share their mean rank).
    Unlike r, one extreme update cannot carry it."""
    return pearson(x.rank(), y.rank())


def panel_text(row: pd.Series) -> str:
    n = int(row["r_seeds"])
    r_seeds = fmt_ci(row["r_mean"], row["r_low"], row["r_high"], n, 2)
    r_seeds = r_seeds.replace(f"(n={n})", f"({n} seed{'s' if n != 1 else ''})")
    agree = (f"{row['agree_share']:.2f} [{row['agree_low']:.2f}, {row['agree_high']:.2f}] "
             f"({int(row['agree'])}/{int(row['counted'])})") if row["counted"] else "—"
    return (f"r pooled = {row['r_pooled']:.2f}, Spearman = {row['spearman_pooled']:.2f} "
            f"({int(row['updates'])} updates)\n"
            f"r per seed = {r_seeds}\nsign agrees: {agree}")


def _shade_agreement(ax: plt.Axes, xlim: float, ylim: float) -> None:
    """The quadrants where prediction and measurement share a sign."""
    ax.fill_between([0, xlim], 0, ylim, color=AGREE_SHADE, alpha=0.06, lw=0)
    ax.fill_between([-xlim, 0], -ylim, 0, color=AGREE_SHADE, alpha=0.06, lw=0)
    ax.axhline(0, color="0.4", lw=0.7)
    ax.axvline(0, color="0.4", lw=0.7)


def caption(runs: RunSet, pairs: pd.DataFrame) -> str:
    reward = {r.cfg("task.reward", "verifier") for r in runs.runs}
    p = sorted({r.cfg("task.reward_p", 0.5) for r in runs.runs})
    rewards = (f"Random rewards (Bernoulli {'/'.join(f'{x:g}' for x in p)}: nothing to learn)"
               if reward == {"random"} else "Rewards: " + "/".join(sorted(reward)))
    modes = "/".join(sorted({str(r.cfg("train.staleness_mode", "minibatch")) for r in runs.runs}))
    seeds = sorted(pairs["seed"].unique())
    return (
        "Eq. 6 prediction against measured entropy change per update: an update changes entropy "
        "by about −η·Cov(log π, A·X) (X = 1 where the token keeps its gradient)\n"
        "x: that prediction up to the positive step factor; y: mean entropy of the update's own "
        "mini-batch tokens after its optimizer step minus before. "
        f"{rewards}; staleness mode {modes}.\n"
        f"One dot per update: {len(pairs)} updates of {pairs['run_id'].nunique()} runs, seeds "
        f"{', '.join(map(str, seeds))}; each panel has its own scale. r: Pearson; Spearman: rank correlation, pooled (one extreme update can carry r, not it); ±: 95% Student-t interval over the per-seed r. "
        "Sign agreement: share of updates\nin the shaded quadrants (sign x = sign y; updates "
        "with either exactly 0 left out), [95% Wilson interval], which counts updates as "
        "independent."
    )


def fig_entropy_law(runs: RunSet, opts: Options) -> FigureResult:
    require(has_entropy_change(runs),
            "no update records with entropy_change (runs made with logger.entropy_change=true)")
    pairs = update_pairs(runs)
    require(not pairs.empty, "no applied update with both entropy_clip_cov and entropy_change")
    law = law_by_cell(pairs)
    law["spearman_pooled"] = [
        spearman(g[PREDICTED], g[MEASURED])
        for g in (pairs[(pairs["method"] == m) & (pairs["staleness"] == k)]
                     for m, k in zip(law["method"], law["staleness"], strict=True))]
    cells = sorted({(m, int(k)) for m, k in zip(law["method"], law["staleness"], strict=True)},
                   key=lambda c: (c[1], style.method_order(law["method"]).index(c[0])))
    seeds = sorted(int(s) for s in pairs["seed"].unique())
    colours = dict(zip(seeds, sns.color_palette("colorblind", len(seeds)).as_hex(), strict=True))
    fig, axes = grid(len(cells), 3, 4.3, 3.7)
    for ax, (method, k) in zip(axes, cells, strict=True):
        d = pairs[(pairs["method"] == method) & (pairs["staleness"] == k)]
        xlim = 1.08 * max(float(np.abs(d[PREDICTED]).max()), 1e-12)
        ylim = 1.08 * max(float(np.abs(d[MEASURED]).max()), 1e-12)
        _shade_agreement(ax, xlim, ylim)
        for seed, s in d.groupby("seed", sort=True):
            ax.scatter(s[PREDICTED], s[MEASURED], s=9, alpha=0.6, lw=0, color=colours[int(seed)])
        row = law[(law["method"] == method) & (law["staleness"] == k)].iloc[0]
        ax.text(0.02, 0.98, panel_text(row), transform=ax.transAxes, va="top", fontsize=7,
                bbox={"facecolor": "white", "alpha": 0.8, "lw": 0, "pad": 2})
        ax.set_xlim(-xlim, xlim)
        ax.set_ylim(-ylim, ylim)
        ax.ticklabel_format(style="sci", scilimits=(-2, 3), useMathText=True)
        ax.xaxis.set_major_locator(MaxNLocator(5, symmetric=True))
        ax.yaxis.set_major_locator(MaxNLocator(5, symmetric=True))
        ax.set_title(panel_title(runs, method, k), fontsize=9, pad=16)  # clear of the x10^n label
        ax.set_xlabel(X_LABEL)
        ax.set_ylabel(Y_LABEL)
    handles = [Line2D([], [], ls="", marker="o", color=colours[s], label=f"seed {s}") for s in seeds]
    fig.legend(handles=handles, loc="lower right", ncol=len(seeds), frameon=False, fontsize=8)
    suptitle(fig, caption(runs, pairs), fontsize=8)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return FigureResult(NAME, save(fig, NAME, opts), pairs, {"law": law})
