"""The clip family's forest: each claim row's paired difference in final greedy accuracy,
seed by seed, one panel per experiment, with the row's verdict after Holm.

The pairs drawn are the rows of analysis/claims/clip_family.py (each method against bapo,
against ppo, and sapo against its token-mean control), read from the cells those rows read,
never from names of its own; the grey band is the sweep's expectation (every method within
±0.05 of both).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.claims.clip_family import EXPERIMENTS, ROWS
from analysis.claims.paper import Suite
from analysis.claims.quantities import values
from analysis.core import style
from analysis.core.multiplicity import PILOT, pilot_label
from analysis.core.plotting import suptitle
from analysis.core.stats import mean_ci
from analysis.figures.contract import FigureResult, Options, require, save

NAME = "fig_clip_family_forest"
BAND = 0.05  # sweeps.yaml: every method within +-0.05 of ppo and of bapo, greedy
VERDICT_COLOURS = {"held": "#1a9850", "not held": "#d73027"}  # the rest grey


def paired_rows(summary: pd.DataFrame, claims: pd.DataFrame) -> pd.DataFrame:
    """Per claim row: its experiment, the pair `a − b`, the per-seed differences of the
    row's quantity over the seeds both cells ran, their mean and 95% t-interval, and the
    row's verdict after Holm (claims: the judged table, keyed by row)."""
    suite, after = Suite(summary), claims.set_index("key")["holm_verdict"]
    rows = []
    for row in ROWS:
        a, b = (values(suite.at(side.cell, 0), side.quantity).dropna() for side in row.sides)
        common = a.index.intersection(b.index)
        d = (a.loc[common] - b.loc[common]).astype(float)
        mean, low, high, n = mean_ci(d)
        rows.append({"key": row.key, "experiment": row.sides[0].cell.experiment,
                     "method": row.sides[0].cell.method,
                     "pair": " − ".join(side.cell.method for side in row.sides),
                     "mean": mean, "low": low, "high": high, "n": n,
                     "per_seed": [round(float(x), 4) for x in d], "after_holm": after[row.key]})
    return pd.DataFrame(rows)


def _panel(ax: plt.Axes, d: pd.DataFrame, pairs: list[str], colours: dict[str, str]) -> None:
    ax.axvspan(-BAND, BAND, color="#dddddd", alpha=0.6, lw=0)
    ax.axvline(0, color="black", lw=0.8)
    for y, pair in enumerate(pairs):
        row = d[d["pair"] == pair].iloc[0]
        colour = colours[row["method"]]
        if row["n"] >= 2 and np.isfinite(row["low"]):
            ax.plot([row["low"], row["high"]], [y, y], color=colour, lw=2)
        ax.plot(row["per_seed"], [y] * len(row["per_seed"]), "o", ms=3, color=colour, alpha=0.5)
        if row["n"]:
            ax.plot([row["mean"]], [y], "D", color=colour, ms=6)
        verdict = row["after_holm"] if row["n"] else "no data"
        verdict = pilot_label(row["n"]) if verdict == PILOT else verdict
        ax.text(0.99, y, verdict, transform=ax.get_yaxis_transform(), ha="right", va="center",
                fontsize=7, color=VERDICT_COLOURS.get(verdict, "#777777"),
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5})
    # the groups by reference (against bapo, against ppo, the control), set apart
    starts = [y for y in range(1, len(pairs)) if pairs[y].split(" − ")[1] != pairs[y - 1].split(" − ")[1]]
    for y in starts:
        ax.axhline(y - 0.5, color="#999999", lw=0.6, ls="--")


def _x_range(d: pd.DataFrame) -> tuple[float, float]:
    """One x range for every panel (the band reads the same in each), with room on the
    right for the verdicts."""
    drawn = [x for _, r in d.iterrows() for x in (r["low"], r["high"], *r["per_seed"])
             if np.isfinite(x)]
    low, high = min([-1.5 * BAND, *drawn]), max([1.5 * BAND, *drawn])
    return low - 0.05 * (high - low), high + 0.35 * (high - low)


def draw_forest(summary: pd.DataFrame, claims: pd.DataFrame, opts: Options) -> FigureResult:
    d = paired_rows(summary, claims)
    require(bool((d["n"] > 0).any()), "no method shares a seed with the cell it is compared with")
    experiments = [e for e in EXPERIMENTS if (d.loc[d["experiment"] == e, "n"] > 0).any()]
    pairs = list(dict.fromkeys(d["pair"]))
    colours = style.method_palette(d["method"].unique())
    fig, axes = plt.subplots(1, len(experiments), figsize=(5.6 * len(experiments),
                                                          1.6 + 0.34 * len(pairs)),
                             sharex=True, sharey=True, squeeze=False)
    for ax, experiment in zip(axes[0], experiments, strict=True):
        _panel(ax, d[d["experiment"] == experiment], pairs, colours)
        ax.set_title(experiment, fontsize=9)
        ax.set_xlabel("difference in final greedy accuracy (share correct)", fontsize=8)
    axes[0][0].set_xlim(*_x_range(d))
    axes[0][0].set_yticks(range(len(pairs)), pairs, fontsize=8)
    axes[0][0].invert_yaxis()
    tests = int(claims["tests"].iat[0]) if len(claims) else 0
    suptitle(fig, "The clip family against bapo, ppo and sapo's token-mean control: final "
             "greedy accuracy (primary; mean of the last 3 evals), method − reference paired by "
             "seed. Diamond: mean; line: 95% t-interval; dots: seeds; grey band: the sweep's "
             f"expectation (within ±{BAND:g}); right: the verdict after Holm over {tests} tests "
             "(held: the method beats the reference; not held: it falls below it)")
    fig.tight_layout()
    return FigureResult(NAME, save(fig, NAME, opts), d)
