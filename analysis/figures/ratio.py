"""How far the IS weights of ppo's tokens spread with staleness: their distribution, and
the share outside ppo's clip range by how stale the update is. Where that share is small,
no clipping rule (fixed or adaptive) has many tokens to act on."""

from __future__ import annotations

import matplotlib.pyplot as plt
import matplotlib.ticker as mticker
import numpy as np
import pandas as pd

from analysis.claims.paper import BASELINE
from analysis.core import style
from analysis.core.loader import RUN_COLS, RunSet
from analysis.core.plotting import sample_note, stx, suptitle
from analysis.figures.contract import FigureResult, Options, require, save

NAME = "fig_is_ratio_by_staleness"
BASE = BASELINE  # the paper's baseline (analysis/claims/paper.py): its IS weights
VIEW = (0.25, 4.0)  # weights outside are counted in the edge bins
BINS = np.geomspace(*VIEW, 41)


def outside_shares(tok: pd.DataFrame, c_low: float, c_high: float) -> pd.DataFrame:
    """Per run and update index: tokens and the share with weight outside [c_low, c_high]."""
    ratio = tok["ratio"].astype("float64")
    t = tok[RUN_COLS].assign(update=tok["update"].astype(int),
                             outside=((ratio < c_low) | (ratio > c_high)).astype(float))
    g = t.groupby([*RUN_COLS, "update"], observed=True)["outside"]
    return g.agg(tokens="size", share_outside="mean").reset_index()


def fig_is_ratio_by_staleness(runs: RunSet, opts: Options) -> FigureResult:
    chosen = runs.select(lambda r: r.method == BASE and bool(r.token_parts))
    require(bool(chosen), f"no '{BASE}' runs with token parts")
    tok = runs.tokens(["ratio", "update"], chosen)
    require(not tok.empty, "token parts of the chosen runs could not be read")
    c_low, c_high = chosen[0].method_param("c_low", 0.8), chosen[0].method_param("c_high", 1.2)
    shares = outside_shares(tok, c_low, c_high)
    levels = sorted(int(k) for k in tok["staleness"].unique())
    colours = style.staleness_palette(levels)
    fig, (dist, by_update) = plt.subplots(1, 2, figsize=(11.0, 4.2))
    pooled = {}
    for k in levels:
        ratio = tok.loc[(tok["staleness"] == k) & (tok["update"] > 0), "ratio"].astype("float64")
        if k == 1:  # one update a rollout: every weight is exactly 1
            ratio = tok.loc[tok["staleness"] == k, "ratio"].astype("float64")
        counts, _ = np.histogram(ratio.clip(*VIEW), BINS)
        share = counts / max(len(ratio), 1)
        pooled[k] = float(((ratio < c_low) | (ratio > c_high)).mean())
        label = (f"{stx(k)}: {pooled[k]:.1%} outside" + (" (update 0 only)" if k == 1
                                                          else " (stale updates)"))
        dist.stairs(share, BINS, color=colours[k], lw=1.4, label=label)
    for bound in (c_low, c_high):
        dist.axvline(bound, color="#D55E00", lw=0.8, ls="--")
    dist.set_xscale("log", base=2)
    dist.set_yscale("log")
    dist.xaxis.set_major_locator(mticker.FixedLocator([0.25, 0.5, 0.8, 1.0, 1.2, 2.0, 4.0]))
    dist.xaxis.set_minor_locator(mticker.NullLocator())
    dist.xaxis.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:g}"))
    dist.set_xlabel("IS weight π_θ/π_behaviour (log scale; edge bins hold all beyond)")
    dist.set_ylabel("share of the level's tokens per bin (log)")
    dist.set_title(f"{BASE}: distribution of IS weights (dashed: clip [{c_low:g}, {c_high:g}])",
                   fontsize=9)
    dist.legend(loc="upper right", frameon=False, fontsize=7.5,
                title="staleness: share outside the clip",
                title_fontsize=8)
    per_update = shares.groupby(["staleness", "update"])["share_outside"].mean().reset_index()
    for k in levels:
        d = per_update[per_update["staleness"] == k]
        by_update.plot(d["update"], d["share_outside"], marker="o", ms=4, color=colours[k],
                       label=stx(k))
    by_update.set_xlabel("update index within the rollout (= its lag in updates)")
    by_update.set_ylabel(f"share of tokens outside [{c_low:g}, {c_high:g}]")
    by_update.set_title("share outside the clip range by how stale the update is "
                        "(mean over seeds)", fontsize=9)
    by_update.xaxis.set_major_locator(mticker.MaxNLocator(integer=True))
    by_update.set_ylim(bottom=0)
    by_update.legend(loc="upper left", frameon=False, fontsize=8, title="staleness",
                     title_fontsize=8)
    seeds = "/".join(str(n) for n in sorted(shares.groupby("staleness")["seed"].nunique().unique()))
    suptitle(fig, f"IS weights of {BASE}'s tokens by staleness ({seeds} seeds per level; "
             f"{sample_note(chosen)}). Update 0 of a rollout is on-policy: every weight is 1.",
             fontsize=9)
    fig.tight_layout()
    pooled_frame = pd.DataFrame({"staleness": list(pooled), "share_outside": list(pooled.values())})
    return FigureResult(NAME, save(fig, NAME, opts), shares, {"pooled": pooled_frame})
