"""Fig 8: how BAPO's bound search ended at each step, per method and staleness: the share
of updates that kept the start bounds, moved them and reached rho0, or ran to the grid
maximum without reaching it. A step-mean of the bounds would average the start bounds with
the grid maximum and look like a value the search settled on; the shares do not."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from analysis.core import style
from analysis.core.loader import Run, RunSet
from analysis.core.plotting import STEP_AXIS, grid, stx, suptitle
from analysis.core.search_outcomes import OUTCOMES, outcome, search_outcomes, searches_bounds
from analysis.figures.contract import FigureResult, Options, require, save

RANGE_KEYS = ("low_start", "low_max", "high_start", "high_max")
# docs/methods.md: the paper reports c_high settling at ~1.9-2.2 and c_low near 0.7.
PAPER_C_HIGH = (1.9, 2.2)
PAPER_C_LOW = 0.7
OUTCOME_COLORS = {
    "at start": "0.65",
    "moved, reached": "#009E73",
    "not reached": "#D55E00",
    "undefined": "#F0E442",
}
OUTCOME_LABELS = {
    "at start": "kept the start bounds (rho >= rho0 already)",
    "moved, reached": "moved the bounds and reached rho0",
    "not reached": "ran to the grid maximum, rho0 not reached",
    "undefined": "undefined (no token with A≠0)",
}


def bound_ranges(runs: list[Run]) -> pd.DataFrame:
    """Distinct movable ranges [start, max] of c_low and c_high found in the configs."""
    rows = [{k: r.method_param(k) for k in RANGE_KEYS} for r in runs]
    df = pd.DataFrame(rows, columns=list(RANGE_KEYS)).dropna().drop_duplicates()
    return df.astype(float).reset_index(drop=True)


def outcomes_by_step(updates: pd.DataFrame, chosen: list[Run]) -> pd.DataFrame:
    """Per (method, staleness, step): the share of each search outcome over the stale
    updates (1..k-1; at 1x, update 0) of every seed, and their count n. `chosen`: the runs
    whose method searches its bounds (their traits name the record keys)."""
    cols = ["method", "staleness", "step", "n", *OUTCOMES]
    traits = {r.run_id: r.traits for r in chosen}
    need = {k for tr in traits.values() for k in (tr.moved, tr.reached)}
    if updates.empty or not traits or None in need or not need <= set(updates.columns):
        return pd.DataFrame(columns=cols)
    u = updates[updates["run_id"].isin(set(traits))].copy()
    if "skipped" in u:
        u = u[~u["skipped"].astype("boolean").fillna(False).astype(bool)]
    u = u[(u["update"] > 0) | (u["staleness"] == 1)]
    if u.empty:
        return pd.DataFrame(columns=cols)
    u["outcome"] = pd.concat([outcome(g, traits[rid])
                              for rid, g in u.groupby("run_id", observed=True)])
    keys = ["method", "staleness", "step"]
    shares = pd.crosstab([u[k] for k in keys], u["outcome"], normalize="index")
    out = shares.reindex(columns=list(OUTCOMES), fill_value=0.0)
    out.insert(0, "n", u.groupby(keys, observed=True).size())
    out = out.reset_index()
    out["method"] = out["method"].astype(str)
    return out[cols]


def grid_text(runs: list[Run]) -> str:
    """'rho0 0.4, c_low 0.6-0.9, c_high 1.2-3': the target (the parameter the method's traits
    name, as analysis/figures/rho.py reads it) and the grid the search walks."""
    r = runs[0]
    low_start, low_max, high_start, high_max = (r.method_param(k) for k in RANGE_KEYS)
    return (f"{r.traits.target} {r.method_param(r.traits.target)}, c_low {low_start:g}-"
            f"{low_max:g}, c_high {high_start:g}-{high_max:g}")


def fig08_bapo_bounds(runs: RunSet, opts: Options) -> FigureResult:
    chosen = runs.select(searches_bounds)
    require(bool(chosen), "no bapo runs (no method with adaptive bounds)")
    per_step = outcomes_by_step(runs.updates, chosen)
    require(not per_step.empty, "no bapo_steps/bapo_reached in update records")
    order = style.method_order(per_step["method"].unique())
    cells = sorted({(m, int(k)) for m, k in zip(per_step["method"], per_step["staleness"],
                                                 strict=True)},
                   key=lambda c: (order.index(c[0]), c[1]))
    # at least 8 inches wide, so one panel still has room for its caption and legend
    fig, axes = grid(len(cells), 3, max(4.0, 8.0 / min(len(cells), 3)), 2.9)
    rows = int(np.ceil(len(cells) / 3))
    fig.set_figheight(2.9 * rows + 1.4)  # the caption above and the legend below
    for ax, (method, k) in zip(axes, cells, strict=True):
        d = per_step[(per_step["method"] == method) & (per_step["staleness"] == k)]
        bottom = np.zeros(len(d))
        for o in OUTCOMES:
            ax.bar(d["step"], d[o], bottom=bottom, width=1.0, color=OUTCOME_COLORS[o],
                   label=OUTCOME_LABELS[o], lw=0)
            bottom += d[o].to_numpy()
        own = [r for r in chosen if r.method == method and r.staleness == k]
        ax.set_title(f"{method} {stx(k)}: {int(d['n'].median())} updates a step "
                     f"({len({r.seed for r in own})} seeds)\n{grid_text(own)}", fontsize=9)
        ax.set_ylim(0, 1)
        ax.set_xlim(d["step"].min() - 0.5, d["step"].max() + 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(STEP_AXIS)
        ax.set_ylabel("share of the step's updates")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, frameon=False, fontsize=8)
    kinds = "stale updates (updates 1 to k-1 of each rollout)" + (", at 1x update 0" if any(k == 1 for _, k in cells)
                                        else "")
    suptitle(fig, f"How BAPO's bound search ended, per step: share of the {kinds} of every "
             "seed.\nThe paper reports c_high settling at "
             f"~{PAPER_C_HIGH[0]:g}-{PAPER_C_HIGH[1]:g} and c_low at ~{PAPER_C_LOW:g}; "
             "here the bounds move only in the green and orange updates.", fontsize=9)
    fig.tight_layout(rect=(0, 0.55 / fig.get_figheight(), 1, 1))
    name = "fig08_bapo_bounds"
    return FigureResult(name, save(fig, name, opts), per_step,
                        {"ranges": bound_ranges(chosen), "outcomes": search_outcomes(runs)})
