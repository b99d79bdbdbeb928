"""lag_bapo: BAPO's search outcome per lag, its positive share before the search against
rho0, and its reach rate against its ceiling (analysis/core/search_ceiling.py), over the
runs whose method searches its bounds (their traits say so)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.core import style
from analysis.core.cells import split_variant
from analysis.core.runs import RunSet
from analysis.core.search_ceiling import reach
from analysis.core.stats import wilson
from analysis.figures.contract import FigureResult, Options, require, save
from analysis.figures.lag_common import lag_order, search_updates

OUTCOME_COLOURS = {"at start": "#9e9e9e", "moved, reached": "#2e7d32",
                   "not reached": "#c62828", "undefined": "#000000"}


def search_by_lag(updates: pd.DataFrame) -> pd.DataFrame:
    """Per (method, lag): the share of each search outcome, the share of updates whose
    positive share before the search was below the method's target, the mean bounds of the
    updates where the search moved and reached its target, and the reach counts against the
    ceiling (search_ceiling.reach). `updates`: annotated by search_ceiling.annotate."""
    rows = []
    for (method, lag), g in updates.groupby(["method", "lag"], observed=True, sort=False):
        shares = g["outcome"].value_counts(normalize=True)
        moved = g[g["outcome"] == "moved, reached"]
        rho0 = pd.to_numeric(g.get("rho0"), errors="coerce")
        r = reach(g)
        rows.append({
            "method": method, "lag": lag, "lag_low": g["lag_low"].iloc[0], "updates": len(g),
            **{o: float(shares.get(o, 0.0)) for o in OUTCOME_COLOURS},
            "rho_before_mean": float(pd.to_numeric(g["rho_before"], errors="coerce").mean()),
            "below_target": float((pd.to_numeric(g["rho_before"], errors="coerce")
                                   < rho0).mean()) if rho0.notna().any() else np.nan,
            "moved_c_low": float(pd.to_numeric(moved["c_low"], errors="coerce").mean()),
            "moved_c_high": float(pd.to_numeric(moved["c_high"], errors="coerce").mean()),
            "moved_n": len(moved),
            "below_n": r.below, "ceiling_n": r.ceiling if r.readable else np.nan,
            "reached_n": r.reached, "ceiling_readable": r.readable,
        })
    return pd.DataFrame(rows)


def _tick(method: str, lag: str) -> str:
    """A cell's label for a narrow column: a variant's changed parameters on a line of their
    own, without the method's prefix (`bapo (bapo.low_start=0.8)` -> `bapo` / `low_start=0.8`),
    and a measured lag's source below it (`lag ~13` / `(replay)`)."""
    name, changed = split_variant(method)
    method = name if not changed else f"{name}\n{changed.replace(f'{name}.', '')}"
    return f"{method}\nlag {lag.replace(' (', chr(10) + '(')}"


def fig_lag_bapo(updates: pd.DataFrame, opts: Options, note: str = "") -> FigureResult:
    """`updates`: steady update records of the runs whose method searches its bounds,
    annotated (search_ceiling.annotate), with `lag`, `lag_low`, `method` and `rho0` (the
    method's target share) columns."""
    require(not updates.empty, "no bapo runs with a lag")
    table = search_by_lag(updates)
    order = lag_order(table["lag"], table["lag_low"])
    methods = style.method_order(table["method"].unique())
    cells = [(m, lag) for lag in order for m in methods
             if ((table["method"] == m) & (table["lag"] == lag)).any()]
    # each panel has a column per cell: ~0.9 in a column keeps three-line labels apart
    fig, axes = plt.subplots(1, 3, figsize=(3 * max(5.0, 1.0 * len(cells)), 5.0))
    t = table.set_index(["method", "lag"])
    _outcome_panel(axes[0], t, cells)
    _rho_before_panel(axes[1], updates, cells)
    _reach_panel(axes[2], t, cells)
    fig.suptitle("BAPO's search by lag (steady updates; every seed's updates pooled)"
                 + (f"\n{note}" if note else ""), fontsize=10)
    fig.tight_layout()
    return FigureResult("lag_bapo", save(fig, "lag_bapo", opts), table)


def _outcome_panel(ax: plt.Axes, t: pd.DataFrame, cells: list[tuple[str, str]]) -> None:
    bottom = np.zeros(len(cells))
    for o, colour in OUTCOME_COLOURS.items():
        vals = np.array([t.loc[c, o] for c in cells])
        ax.bar(range(len(cells)), vals, bottom=bottom, color=colour, label=o)
        bottom += vals
    ax.set_xticks(range(len(cells)), [f"{_tick(m, lag)}\n({t.loc[(m, lag), 'updates']} updates)"
                                      for m, lag in cells], fontsize=7)
    ax.set_ylabel("share of updates")
    ax.set_title("how the search ended (n updates)", fontsize=9)
    # below the tick labels: inside the panel it covered the last bar
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=4, frameon=False)


def _rho_before_panel(ax: plt.Axes, updates: pd.DataFrame, cells: list[tuple[str, str]]) -> None:
    def of(m: str, lag: str, col: str) -> pd.Series:
        here = updates.loc[(updates["method"] == m) & (updates["lag"] == lag), col]
        return pd.to_numeric(here, errors="coerce").dropna()

    ax.boxplot([of(m, lag, "rho_before") for m, lag in cells], showfliers=False)
    for i, (m, lag) in enumerate(cells):
        target = of(m, lag, "rho0")
        if len(target):
            ax.hlines(target.iloc[0], i + 0.6, i + 1.4, color="#c62828", lw=2)
    ax.set_xticks(range(1, len(cells) + 1), [_tick(m, lag) for m, lag in cells], fontsize=7)
    ax.set_ylabel("positive share of the gradient at the start bounds")
    ax.set_title("rho before the search, per update (box: quartiles, orange: median,\n"
                 "whiskers: 1.5 IQR; red: the method's target rho0)", fontsize=9)


REACH_BARS = {"ceiling_n": ("grid can reach rho0 (ceiling)", "#9e9e9e"),
              "reached_n": ("search reached rho0", "#2e7d32")}


def _reach_panel(ax: plt.Axes, t: pd.DataFrame, cells: list[tuple[str, str]]) -> None:
    """Of the updates that start below rho0: the share some bounds in the grid reach (the
    ceiling) and the share the search reached, Wilson 95% over the pooled updates. Equal
    bars: the search reaches rho0 wherever its grid can."""
    width, top = 0.38, 0.0
    for j, (col, (label, colour)) in enumerate(REACH_BARS.items()):
        for i, cell in enumerate(cells):
            row = t.loc[cell]
            below, k = int(row["below_n"]), row[col]
            if not below or k != k:  # nothing below rho0, or the ceiling is not readable
                continue
            share, low, high = wilson(int(k), below)
            x = i + (j - 0.5) * width
            ax.bar(x, share, width, color=colour, label=label)  # legend de-duplicated below
            ax.vlines(x, low, high, color="black", lw=1)
            top = max(top, high)
    top = min(1.0, max(top, 0.05)) * 1.45
    for i, cell in enumerate(cells):
        row = t.loc[cell]
        ceiling = int(row["ceiling_n"]) if row["ceiling_readable"] else "n/a"
        ax.text(i, top * 0.97, f"below {int(row['below_n'])}\nceiling {ceiling}\n"
                f"reached {int(row['reached_n'])}", ha="center", va="top", fontsize=7)
    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles, strict=True))
    # between the counts (top) and the whiskers (at most 1/1.45 of the axis)
    ax.legend(seen.values(), seen.keys(), fontsize=7, loc="upper center",
              bbox_to_anchor=(0.5, 0.84), ncol=2)
    ax.set_ylim(0, top)
    ax.set_xticks(range(len(cells)), [_tick(m, lag) for m, lag in cells], fontsize=7)
    ax.set_ylabel("share of the updates that start below rho0")
    ax.set_title("reach rate against its ceiling (Wilson 95%, pooled updates); equal bars:\n"
                 "reached wherever the grid can. Counts: updates below rho0 at the start, of\n"
                 "them reachable (n/a: not readable under the value reading) and reached",
                 fontsize=8)


def draw(runs: RunSet, opts: Options) -> FigureResult:
    return fig_lag_bapo(search_updates(runs), opts)
