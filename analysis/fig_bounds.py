"""Fig 8: the bounds BAPO chose at each step, inside the grid it may move them in, next to
the paper's values, and how each search ended (a mean of bounds alone hides that)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from analysis import style
from analysis.loader import Run, RunSet
from analysis.plotting import (
    STEP_AXIS,
    FigureResult,
    Options,
    clip_bands,
    draw_curves,
    require,
    save,
    step_curves,
    stx,
)
from analysis.search_outcomes import OUTCOMES, search_outcomes, searches_bounds

RANGE_KEYS = ("low_start", "low_max", "high_start", "high_max")
# methods.md: the paper reports c_high settling at ~1.9-2.2 and c_low near 0.7.
PAPER_C_HIGH = (1.9, 2.2)
PAPER_C_LOW = 0.7
OUTCOME_COLORS = {
    "at start": "0.65",
    "moved, reached": "#009E73",
    "not reached": "#D55E00",
    "undefined": "#F0E442",
}
OUTCOME_LABELS = {"not reached": "not reached (grid max)"}


def bound_ranges(runs: list[Run]) -> pd.DataFrame:
    """Distinct movable ranges [start, max] of c_low and c_high found in the configs."""
    rows = [{k: r.method_param(k) for k in RANGE_KEYS} for r in runs]
    df = pd.DataFrame(rows, columns=list(RANGE_KEYS)).dropna().drop_duplicates()
    return df.astype(float).reset_index(drop=True)


def fig08_bapo_bounds(runs: RunSet, opts: Options) -> FigureResult:
    chosen = runs.select(searches_bounds)
    require(bool(chosen), "no bapo runs (no method with adaptive bounds)")
    ids = {r.run_id for r in chosen}
    steps = runs.steps[runs.steps["run_id"].isin(ids)]
    require({"c_low", "c_high"} <= set(steps.columns), "no c_low/c_high in step records")
    ranges = bound_ranges(chosen)
    grid = {}
    if not ranges.empty:  # bands stay inside the grid the search can reach
        grid = {"c_high": (ranges["high_start"].min(), ranges["high_max"].max()),
                "c_low": (ranges["low_start"].min(), ranges["low_max"].max())}
    curves = clip_bands(step_curves(steps, ["c_high", "c_low"], opts.smooth), grid)
    outcomes = search_outcomes(runs)
    levels = sorted({r.staleness for r in chosen})
    palette = style.method_palette(runs.methods)
    own = {m: bound_ranges([r for r in chosen if r.method == m]) for m in {r.method for r in chosen}}
    fig, axes = plt.subplots(3, len(levels), figsize=(3.3 * len(levels) + 1.6, 7.4),
                             squeeze=False, sharey="row")
    for j, k in enumerate(levels):
        for i, (metric, lo, hi) in enumerate([("c_high", "high_start", "high_max"),
                                              ("c_low", "low_start", "low_max")]):
            ax = axes[i, j]
            if grid:
                ax.axhspan(*grid[metric], color="0.5", alpha=0.12, lw=0, label="movable grid")
            for method in sorted({r.method for r in chosen if r.staleness == k}):
                for _, r in own[method].iterrows():  # a method with a smaller grid: its edges
                    if (r[lo], r[hi]) != grid.get(metric):
                        ax.axhline(r[hi], color=palette[method], lw=0.9, ls=":",
                                   label=f"{method} grid max")
            if metric == "c_high":
                ax.axhspan(*PAPER_C_HIGH, facecolor="none", edgecolor="#E69F00", hatch="///",
                           lw=0, label="paper: c_high ~1.9-2.2")
            else:
                ax.axhline(PAPER_C_LOW, color="#E69F00", lw=1.2, ls="--",
                           label="paper: c_low ~0.7")
            draw_curves(ax, curves[(curves["metric"] == metric) & (curves["staleness"] == k)],
                        runs, dashed=False)
            if ax.get_legend() is not None:
                ax.get_legend().remove()
            ax.set_title(f"staleness {stx(k)}" if i == 0 else "", fontsize=9)
            ax.set_ylabel(f"{metric} (IS-ratio bound)" if j == 0 else "")
            ax.set_xlabel(STEP_AXIS if i == 1 else "")
        _outcome_bars(axes[2, j], outcomes, k)
    axes[2, 0].set_ylabel("how the search ended\n(share of updates)")
    handles, labels = [], []
    skip = {"method", "staleness", *(stx(k) for k in levels)}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels and lab not in skip:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="center right", frameon=False, fontsize=8)
    fig.suptitle("BAPO bounds per step: mean over seeds, band: 95% t-interval clipped to the "
                 "movable grid")
    fig.tight_layout(rect=(0, 0, 1 - 1.7 / fig.get_figwidth(), 1))
    name = "fig08_bapo_bounds"
    return FigureResult(name, save(fig, name, opts), curves,
                        {"ranges": ranges, "outcomes": outcomes})


def _outcome_bars(ax: plt.Axes, outcomes: pd.DataFrame, k: int) -> None:
    """One stacked bar per method: the share of its updates by how the search ended
    (stale updates; at 1x every update is on-policy, so those)."""
    kind = "0 (on-policy)" if k == 1 else "1..k-1 (stale)"
    rows = (outcomes[(outcomes["staleness"] == k) & (outcomes["updates"] == kind)]
            if not outcomes.empty else outcomes)
    if rows.empty:
        ax.text(0.5, 0.5, "search outcome\nnot logged", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_xticks([])
        return
    rows = rows.set_index("method").loc[style.method_order(rows["method"])]
    left = pd.Series(0.0, index=rows.index)
    for outcome in OUTCOMES:
        ax.barh(rows.index, rows[outcome], left=left, color=OUTCOME_COLORS[outcome],
                label=OUTCOME_LABELS.get(outcome, outcome), height=0.6)
        left += rows[outcome]
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.set_xlabel(f"share of {'on-policy' if k == 1 else 'stale'} updates (n = "
                  + ", ".join(str(int(n)) for n in rows["n"]) + ")", fontsize=8)
    ax.tick_params(axis="y", labelsize=8)
