"""Entropy by quadrant: token entropy by advantage sign x clip state (token Parquet).

The paper's account of the entropy fall: the clip removes the gradient of the tokens whose
update would raise entropy most (low-probability A>0 tokens clipped at c_high) and keeps
the ones that lower it. Whether the clipped tokens are the high-entropy ones is what this
figure shows: per quadrant (A>0 or A<0, kept or clipped) the mean entropy of its tokens.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.core.loader import RUN_COLS, RunSet
from analysis.core.plotting import bar_panel, grid, sample_note, shared_legend, stx, suptitle
from analysis.figures.contract import FigureResult, Options, require, save
from src.run_vocab import NO_GRADIENT_STATES

QUADRANTS = ["A>0, kept", "A>0, clipped", "A<0, kept", "A<0, clipped"]
# A run's quadrant mean over fewer tokens than this is left out: a handful of clipped tokens
# in a sampled run would swing the bar by itself.
MIN_TOKENS = 20
NAME = "fig_entropy_quadrants"


def quadrant_entropy(runs: RunSet) -> pd.DataFrame:
    """Per run and quadrant (tokens with A != 0): tokens, their summed and mean entropy;
    the mean is NaN under MIN_TOKENS tokens."""
    rows = []
    for run in runs.select(lambda r: bool(r.token_parts)):
        tok = runs.tokens(["advantage", "clip_state", "entropy"], [run])  # one run at a time
        if tok.empty:
            continue
        tok = tok[tok["advantage"] != 0]
        neg = tok["advantage"].to_numpy() < 0
        clipped = tok["clip_state"].isin(NO_GRADIENT_STATES).to_numpy()
        quadrant = 2 * neg.astype(int) + clipped.astype(int)  # index into QUADRANTS
        entropy = tok["entropy"].to_numpy(dtype="float64")
        n = np.bincount(quadrant, minlength=4)
        total = np.bincount(quadrant, weights=entropy, minlength=4)
        for i, label in enumerate(QUADRANTS):
            rows.append({**{k: getattr(run, k) for k in RUN_COLS}, "quadrant": label,
                         "tokens": int(n[i]), "entropy_sum": float(total[i]),
                         "entropy": total[i] / n[i] if n[i] >= MIN_TOKENS else np.nan})
    return pd.DataFrame(rows, columns=[*RUN_COLS, "quadrant", "tokens", "entropy_sum", "entropy"])


def fig_entropy_quadrants(runs: RunSet, opts: Options) -> FigureResult:
    """Mean token entropy per quadrant, one panel per staleness where any token was clipped
    (at 1x every IS weight is 1: nothing is clipped), on one y scale."""
    d = quadrant_entropy(runs)
    require(not d.empty, "no runs with readable token parts")
    clipped = d[d["quadrant"].str.endswith("clipped")].groupby("staleness")["tokens"].sum()
    levels = [int(k) for k in sorted(clipped.index) if clipped[k] > 0]
    require(bool(levels), "no token clipped at any staleness (every IS weight is 1)")
    empty = [stx(k) for k in sorted(clipped.index) if clipped[k] == 0]
    fig, axes = grid(len(levels), 3, max(5.0, 9.0 / min(len(levels), 3)), 4.0)
    top = 0.0
    for ax, k in zip(axes, levels, strict=True):
        part = d[d["staleness"] == k]
        bar_panel(ax, part.dropna(subset=["entropy"]), "quadrant", "entropy", QUADRANTS, runs,
                  bounds=(0.0, None))
        counts = part.groupby("quadrant")["tokens"].sum()
        ax.set_xticks(range(len(QUADRANTS)),
                      [f"{q}\n{int(counts.get(q, 0)):,} tokens" for q in QUADRANTS], fontsize=8)
        top = max(top, ax.get_ylim()[1])
        ax.set_title(f"staleness {stx(k)}")
        ax.set_ylabel("mean token entropy (nats)")
        ax.set_xlabel("advantage sign, clip state (kept: carries gradient)")
    for ax in axes:  # one scale: a bar's height means the same in every panel
        ax.set_ylim(0, top)
    shared_legend(fig, axes)
    note = (f" No panel for {', '.join(empty)}: no token clipped there (every IS weight is 1)."
            if empty else "")
    suptitle(fig, "Token entropy by quadrant of advantage sign x clip state (tokens with A≠0; "
             "clipped: left without gradient by the clip, A>0 above c_high or A<0 below c_low)."
             f"\nBars: mean over seeds of each run's mean entropy in the quadrant (a run's "
             f"quadrant under {MIN_TOKENS} tokens is left out); whiskers: 95% Student-t "
             f"interval over seeds; under each quadrant its tokens over all runs of the panel; "
             f"{sample_note(runs.runs)}.{note}", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1 - 1.5 / fig.get_figwidth(), 1))
    return FigureResult(NAME, save(fig, NAME, opts), d)
