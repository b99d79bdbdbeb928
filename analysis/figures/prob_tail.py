"""Fig 5: how probable the tokens are under the policy being trained, by IS weight and
advantage sign, drawn so that the tail shows.

On the tiny testbeds almost every token has p > 0.99, so boxes of p per IS-weight bin sit
at 1 and say nothing (the figure as first drawn). Here each line is the ECDF of 1 - p on a
log axis, per group of IS weights (below the clip, inside it, above it) and sign: a line
to the right holds less probable tokens. A group under MIN_LINE_TOKENS tokens is no line;
the legend gives every line's token count.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.claims.paper import BASELINE
from analysis.core.loader import RUN_COLS, RunSet
from analysis.core.plotting import sample_note, stx, suptitle
from analysis.figures.contract import FigureResult, Options, require, save
from analysis.figures.tokens import SIGN_COLORS

NAME = "fig05_prob_by_is_weight"
FLOOR = 1e-6  # 1 - p below this (p rounds to 1 in float32) is drawn at the floor
MIN_LINE_TOKENS = 20  # an ECDF over fewer tokens than this is left out (its count is listed)
GROUP_STYLES = {"below": ":", "inside": "-", "above": "--"}


def tail_rows(runs: RunSet, opts: Options) -> tuple[pd.DataFrame, float, float, list]:
    """Token rows (A != 0) of the baseline's stale runs: 1 - p under π_θ, the IS-weight
    group against the runs' clip bounds, and the sign; with the bounds and the runs."""
    chosen = runs.select(lambda r: r.method == BASELINE and r.staleness > 1 and bool(r.token_parts))
    require(bool(chosen), f"no off-policy (staleness > 1) '{BASELINE}' runs with token parts")
    tok = runs.tokens(["logp", "ratio", "advantage"], chosen, sample=opts.box_rows)
    require(not tok.empty, "token parts of the chosen runs could not be read")
    tok = tok[tok["advantage"] != 0]  # A = 0 tokens carry no gradient and have no sign
    c_low, c_high = chosen[0].method_param("c_low", 0.8), chosen[0].method_param("c_high", 1.2)
    ratio = tok["ratio"].astype("float64")
    data = tok[RUN_COLS].copy()
    data["one_minus_p"] = (1.0 - np.exp(tok["logp"].astype("float64"))).clip(lower=FLOOR)
    data["group"] = np.select([ratio < c_low, ratio >= c_high], ["below", "above"], "inside")
    data["sign"] = np.where(tok["advantage"] > 0, "A>0", "A<0")
    return data.reset_index(drop=True), c_low, c_high, chosen


def line_counts(data: pd.DataFrame) -> pd.DataFrame:
    """Tokens per (staleness, group, sign), every group listed, and whether it is a line."""
    index = pd.MultiIndex.from_product([sorted(data["staleness"].unique()), list(GROUP_STYLES),
                                        list(SIGN_COLORS)], names=["staleness", "group", "sign"])
    n = data.groupby(["staleness", "group", "sign"]).size().reindex(index, fill_value=0)
    return n.rename("tokens").to_frame().assign(drawn=lambda c: c["tokens"] >= MIN_LINE_TOKENS)


def _group_text(group: str, c_low: float, c_high: float) -> str:
    return {"below": f"r < {c_low:g}", "inside": f"{c_low:g} ≤ r < {c_high:g}",
            "above": f"r ≥ {c_high:g}"}[group]


def _panel(ax: plt.Axes, d: pd.DataFrame, counts: pd.DataFrame, c_low: float,
           c_high: float) -> None:
    for group, ls in GROUP_STYLES.items():
        for sign, colour in SIGN_COLORS.items():
            n = int(counts.loc[(group, sign), "tokens"])
            x = np.sort(d.loc[(d["group"] == group) & (d["sign"] == sign), "one_minus_p"])
            label = f"{sign}, {_group_text(group, c_low, c_high)}: {n:,} tokens"
            if n < MIN_LINE_TOKENS:
                ax.plot([], [], ls=ls, color=colour, alpha=0.3, label=f"{label} (no line)")
                continue
            ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", ls=ls, color=colour,
                    lw=1.6, label=label)
    ax.set_xscale("log")
    ax.set_xlim(10 ** np.floor(np.log10(d["one_minus_p"].min())) / 1.5, 1.0)
    ax.set_ylim(0, 1.01)
    ax.set_xlabel("1 − p, p = the token's probability under π_θ (log scale; right: less probable)")
    ax.set_ylabel("share of the group's tokens with 1 − p ≤ x")
    ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2,
              frameon=False, title="sign, IS weight r (tokens)", title_fontsize=7.5)


def fig05_prob_by_ratio(runs: RunSet, opts: Options) -> FigureResult:
    """Fig 5: the ECDF of 1 - p per IS-weight group and sign, one panel per staleness."""
    data, c_low, c_high, chosen = tail_rows(runs, opts)
    counts = line_counts(data)
    levels = sorted(data["staleness"].unique())
    fig, axes = plt.subplots(1, len(levels), figsize=(6.2 * len(levels), 6.0), squeeze=False,
                             sharey=True)
    for ax, k in zip(axes.flat, levels, strict=True):
        here = data[data["staleness"] == k]
        _panel(ax, here, counts.loc[k], c_low, c_high)
        ax.set_title(f"{BASELINE} {stx(k)} ({here['seed'].nunique()} seeds)")
    suptitle(fig, f"Token probability under π_θ (before the update's step) by IS weight r and "
             f"advantage sign, tokens with A≠0 of every update; {sample_note(chosen)}. Each "
             "line: the ECDF of 1 − p (most tokens have p > 0.99, so p itself would sit at 1); "
             f"dotted: below the clip, solid: inside [{c_low:g}, {c_high:g}), dashed: above it. "
             f"A group under {MIN_LINE_TOKENS} tokens is no line; 1 − p under {FLOOR:g} is drawn "
             "at the left edge.", fontsize=9)
    fig.tight_layout()
    return FigureResult(NAME, save(fig, NAME, opts), data, {"counts": counts.reset_index()})
