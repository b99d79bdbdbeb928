"""BAPO's positive share rho at the start bounds (`rho_before`, before any search step)
against its target rho0, per update: the search only acts on updates below rho0. When almost
every update already meets rho0, BAPO has nothing to act on and makes ppo's update."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.core import style
from analysis.core.loader import RUN_COLS, RunSet
from analysis.core.plotting import grid, stx, suptitle
from analysis.core.search_outcomes import searches_bounds
from analysis.figures.contract import FigureResult, Options, require, save

NAME = "fig_bapo_rho_before"
TARGET_COLOR = "#D55E00"


def rho_before_rows(runs: RunSet) -> pd.DataFrame:
    """One row per applied stale update of a bapo-objective run (at 1x, update 0): its
    rho_before, rho_after (at the bounds the search ended on), the run's rho0, and whether
    rho_before is below rho0 (the search acts)."""
    cols = [*RUN_COLS, "step", "update", "rho_before", "rho_after", "rho0", "below_rho0"]
    chosen = runs.select(searches_bounds)
    u = runs.updates
    keys = {(r.traits.measure_at_start, r.traits.measure) for r in chosen}
    if not chosen or u.empty or keys != {("rho_before", "rho")} or "rho_before" not in u.columns:
        return pd.DataFrame(columns=cols)  # (a method searching on another measure: not this figure)
    rho0 = {r.run_id: r.method_param(r.traits.target) for r in chosen}
    u = u[u["run_id"].isin(rho0)].copy()
    if "skipped" in u:
        u = u[~u["skipped"].astype("boolean").fillna(False).astype(bool)]
    u = u[(u["update"] > 0) | (u["staleness"] == 1)]
    u["rho_before"] = pd.to_numeric(u["rho_before"], errors="coerce")
    u["rho_after"] = pd.to_numeric(u["rho"], errors="coerce")  # at the bounds used
    u = u.dropna(subset=["rho_before"])  # undefined: no token with A != 0
    u["rho0"] = u["run_id"].astype(str).map(rho0).astype(float)
    u["below_rho0"] = u["rho_before"] < u["rho0"]
    return u[cols].reset_index(drop=True)


def shared_range(rows: pd.DataFrame) -> tuple[float, float]:
    """One x range for every panel, around the data and the targets (to 0.05), within
    [0, 1]: the whole unit range squeezed the histograms into a fifth of each panel."""
    values = pd.concat([rows["rho_before"], rows["rho_after"].dropna(), rows["rho0"]])
    lo = max(0.0, np.floor((values.min() - 0.02) * 20) / 20)
    hi = min(1.0, np.ceil((values.max() + 0.02) * 20) / 20)
    return float(lo), float(hi)


def _rho_panel(ax: plt.Axes, d: pd.DataFrame, colour: str, bins: np.ndarray) -> dict:
    """One cell's histograms, its target and title; returns its row of the shares table."""
    counts, _ = np.histogram(d["rho_before"].clip(bins[0], bins[-1]), bins)
    ax.stairs(counts / len(d), bins, fill=True, color=colour, alpha=0.6, label="before the search")
    after, _ = np.histogram(d["rho_after"].dropna().clip(bins[0], bins[-1]), bins)
    ax.stairs(after / len(d), bins, color="0.15", lw=1.0, label="after the search")
    below = float(d["below_rho0"].mean())
    moved = d[d["below_rho0"]]
    rise = float((moved["rho_after"] - moved["rho_before"]).mean()) if len(moved) else 0.0
    rise = round(rise, 3) + 0.0  # no "-0.000"
    for target in sorted(d["rho0"].unique()):
        ax.axvline(target, color=TARGET_COLOR, lw=1.2, ls="--")
        ax.text(target, 0.97, f" rho0 = {target:g}", transform=ax.get_xaxis_transform(),
                color=TARGET_COLOR, fontsize=8, va="top")
    ax.set_xlim(bins[0], bins[-1])
    method, k = str(d["method"].iat[0]), int(d["staleness"].iat[0])
    ax.set_title(f"{method} {stx(k)}: {d['seed'].nunique()} seeds, {len(d):,} updates\n"
                 f"below rho0: {below:.0%}; raised by the search: {rise:+.3f}", fontsize=9)
    ax.set_ylabel("share of updates per bin")
    return {"method": method, "staleness": k, "updates": len(d),
            "seeds": int(d["seed"].nunique()), "below_rho0": below, "mean_rise_below": rise}


def fig_bapo_rho_before(runs: RunSet, opts: Options) -> FigureResult:
    rows = rho_before_rows(runs)
    require(not rows.empty, "no bapo runs with rho_before in their update records")
    order = style.method_order(rows["method"].astype(str).unique())
    cells = sorted({(str(m), int(k)) for m, k in zip(rows["method"], rows["staleness"],
                                                      strict=True)},
                   key=lambda c: (order.index(c[0]), c[1]))
    palette = style.method_palette(runs.methods)
    fig, axes = grid(len(cells), 3, max(4.4, 8.0 / min(len(cells), 3)), 3.0)
    fig.set_figheight(3.0 * -(-len(cells) // 3) + 1.3)  # the caption above, the legend below
    bins = np.linspace(*shared_range(rows), 41)
    shares = []
    for ax, (method, k) in zip(axes, cells, strict=True):
        d = rows[(rows["method"] == method) & (rows["staleness"] == k)]
        shares.append(_rho_panel(ax, d, palette[method], bins))
        contribution = next(r.cfg("method.bapo.contribution", "gradient") for r in runs.runs
                            if r.method == method and r.staleness == k)
        ax.set_xlabel("rho: positive share of " + ("|r·A| (gradient reading)"
                                                   if contribution == "gradient"
                                                   else "the surrogate value (Eq. 8)"))
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, frameon=False, fontsize=8)
    suptitle(fig, "BAPO's rho per update at its start bounds (filled: before any search step) "
             "and at the bounds the search ended on (line), over the stale updates (1 to k-1 "
             f"of each rollout) of every seed; every panel on one x range ({bins[0]:g}-"
             f"{bins[-1]:g}).\nThe search moves the bounds only when rho < rho0 (dashed); "
             "where the two histograms coincide, widening the bounds changed nothing.",
             fontsize=9)
    fig.tight_layout(rect=(0, 0.35 / fig.get_figheight(), 1, 1))
    return FigureResult(NAME, save(fig, NAME, opts), rows, {"shares": pd.DataFrame(shares)})
