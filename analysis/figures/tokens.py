"""Token-level figures from the Parquet parts (paper Fig 10; Fig 5 is
analysis/figures/prob_tail.py, the entropy quadrants analysis/figures/quadrants.py)."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import matplotlib.ticker as mticker
import numpy as np
import pandas as pd

from analysis.core import style
from analysis.core.loader import RUN_COLS, Run, RunSet
from analysis.core.plotting import sample_note, stx, suptitle
from analysis.figures.contract import FigureResult, Options, require, save

SIGN_COLORS = {"A>0": "#009E73", "A<0": "#CC79A7"}  # Okabe-Ito; no method uses them
# High and low probability tokens (the token viewer's default split). At probability 0.5,
# not the median: a fixed split means "the model prefers this token" and lets the shares
# move between runs, while a median split would pin each half at 50% by construction.
PROB_SPLIT = 0.5
def _common_staleness(runs: RunSet) -> list[Run]:
    """The runs with token parts at the one staleness > 1 that the most methods share (ties:
    the higher), so every panel compares methods at the same staleness."""
    methods: dict[int, set[str]] = {}
    for r in runs.runs:
        if r.staleness > 1 and r.token_parts:
            methods.setdefault(r.staleness, set()).add(r.method)
    if not methods:
        return []
    level = max(methods, key=lambda k: (len(methods[k]), k))
    return [r for r in runs.runs if r.token_parts and r.staleness == level]


# Fig 10's "near 1" band: tokens whose IS weight the update has barely moved.
NEAR_ONE = (0.95, 1.05)


RATIO_VIEW = (0.25, 4.0)  # fig 10's IS-weight axis; weights outside are drawn at its edge
RATIO_TICKS = [0.25, 0.5, 1.0, 2.0, 4.0]


def _fig10_panel(runs: RunSet, mruns: list[Run], opts: Options) -> pd.DataFrame | None:
    """One method's panel data: a seeded sample of its stale tokens for the scatter, and the
    near-1 share over every stale token (only the scatter is sampled)."""
    tok = runs.tokens(["logp", "ratio", "entropy", "update"], mruns)
    tok = tok[tok["update"] > 0]
    if tok.empty:
        return None
    ratio = tok["ratio"].astype("float64")
    near_one = float(ratio.between(*NEAR_ONE).mean())
    n = max(1, opts.scatter_rows * len(mruns))
    tok = tok.sample(n=min(n, len(tok)), random_state=0) if len(tok) > n else tok
    d = tok[RUN_COLS].copy()
    d["ratio"] = tok["ratio"].astype("float64")
    d["prob"] = np.exp(tok["logp"].astype("float64"))
    d["entropy"] = tok["entropy"].astype("float64")
    d["near_one_share"] = near_one
    d["stale_tokens"] = len(ratio)
    d["c_low"], d["c_high"] = mruns[0].method_param("c_low"), mruns[0].method_param("c_high")
    d["adaptive_bounds"] = mruns[0].traits.adaptive_bounds
    return d


def _fig10_axes(ax: plt.Axes, d: pd.DataFrame, norm: plt.Normalize) -> None:
    """One panel: the scatter, a fixed method's clip bounds, and the near-1 share."""
    o = d.sort_values("entropy")  # high entropy drawn last, on top
    x = o["ratio"].clip(*RATIO_VIEW)
    outside = (o["ratio"] < RATIO_VIEW[0]) | (o["ratio"] > RATIO_VIEW[1])
    for mask, marker in ((~outside, "o"), (outside, ">")):
        ax.scatter(x[mask], o["prob"][mask], c=o["entropy"][mask], cmap="viridis", norm=norm,
                   s=5, marker=marker, linewidths=0, alpha=0.6, rasterized=True)
    fixed = not d["adaptive_bounds"].iat[0] and d["c_low"].notna().iat[0]
    clip = ""
    if fixed and d["c_high"].notna().iat[0]:  # a fixed token-ratio clip: where it cuts
        for bound in (d["c_low"].iat[0], d["c_high"].iat[0]):
            ax.axvline(bound, color="#D55E00", lw=0.8, ls="--")
        clip = f", clip [{d['c_low'].iat[0]:g}, {d['c_high'].iat[0]:g}]"
    ax.axvline(1.0, color="0.5", lw=0.8, ls=":")
    ax.set_xscale("log", base=2)
    ax.set_xlim(RATIO_VIEW[0] / 1.08, RATIO_VIEW[1] * 1.08)
    ax.xaxis.set_major_locator(mticker.FixedLocator(RATIO_TICKS))
    ax.xaxis.set_minor_locator(mticker.NullLocator())
    ax.xaxis.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylim(-0.02, 1.02)
    # what the dots hide, and the clip, in the title: inside the panel they crossed a bound
    ax.set_title(f"{d['method'].iat[0]} {stx(d['staleness'].iat[0])}{clip}\n"
                 f"{d['near_one_share'].iat[0]:.0%} of {d['stale_tokens'].iat[0]:,} stale "
                 f"tokens at {NEAR_ONE[0]:g}-{NEAR_ONE[1]:g}", fontsize=9)


def fig10_prob_ratio_entropy(runs: RunSet, opts: Options) -> FigureResult:
    """Fig 10: probability vs IS weight coloured by entropy, tokens of stale updates only
    (update 0 is on-policy: every weight is exactly 1 and says nothing here), every method at
    one staleness. Each panel states the share of tokens near 1, which the dots hide."""
    chosen = _common_staleness(runs)
    require(bool(chosen), "no off-policy (staleness > 1) runs with token parts")
    panels = [d for method in style.method_order({r.method for r in chosen})
              if (d := _fig10_panel(runs, [r for r in chosen if r.method == method], opts))
              is not None]
    require(bool(panels), "token parts of the chosen runs could not be read")
    data = pd.concat(panels, ignore_index=True)
    # One colour scale for every panel, up to the 99th percentile (a few flat tokens would
    # wash it out), so the same colour means the same entropy everywhere.
    norm = plt.Normalize(0.0, max(float(data["entropy"].quantile(0.99)), 1e-6))
    ncols = min(len(panels), 4)
    nrows = math.ceil(len(panels) / ncols)
    fig, grid_axes = plt.subplots(nrows, ncols, figsize=(3.2 * ncols + 0.8, 2.9 * nrows + 0.5),
                                  squeeze=False, sharex=True, sharey=True, layout="constrained")
    axes = list(grid_axes.flat[: len(panels)])
    for ax in grid_axes.flat[len(panels):]:
        ax.set_visible(False)
    for i, (ax, d) in enumerate(zip(axes, panels, strict=True)):
        _fig10_axes(ax, d, norm)
        ax.set_xlabel("IS weight π/π_behaviour" if i >= len(panels) - ncols else "")
        ax.set_ylabel("token probability (0-1)" if i % ncols == 0 else "")
        ax.tick_params(labelbottom=True)
    cbar = fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap="viridis"), ax=axes,
                        fraction=0.03, pad=0.01)
    cbar.set_label("token entropy (nats)")
    level = stx(data["staleness"].iat[0])
    dots = opts.scatter_rows
    suptitle(fig, f"Token probability (π_θ before the update) vs IS weight (log scale), tokens "
             f"of stale updates (update >= 1), every method at {level}; "
             f"{sample_note(chosen)}.\nDots: up to {dots:,} tokens per run, drawn at random; "
             f"most tokens sit at a weight of {NEAR_ONE[0]:g}-{NEAR_ONE[1]:g} (their share of "
             "all stale tokens under each panel's title), where dots overlap.\nDashed: a fixed "
             "method's clip bounds. Weights outside [1/4, 4] are drawn at the edge (>).",
             fontsize=10)
    name = "fig10_prob_is_entropy"
    return FigureResult(name, save(fig, name, opts), data)
