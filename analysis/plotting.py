"""Shared figure machinery: options, skip signal, mean-with-band line panels, bar panels."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.ticker import MaxNLocator

from analysis import style
from analysis.loader import RUN_COLS, RunSet
from analysis.stats import agg_ci, mean_ci


class SkipFigure(Exception):
    """The runs a figure needs are not there; the message says which."""


@dataclass
class Options:
    out: Path = Path("figures")
    formats: tuple[str, ...] = ("png", "pdf")
    dpi: int = 150
    smooth: int = 1  # rolling mean over steps, per run, before averaging seeds
    last_k: int = 5  # "final" = mean of the last k steps
    scatter_rows: int = 1500  # token rows per run drawn in scatter plots
    box_rows: int = 50_000  # token rows per run feeding box plots


@dataclass
class FigureResult:
    name: str
    paths: list[Path]
    data: pd.DataFrame  # exactly what was plotted
    extra: dict[str, pd.DataFrame] = field(default_factory=dict)


def save(fig: plt.Figure, name: str, opts: Options) -> list[Path]:
    return style.save(fig, opts.out, name, opts.formats, opts.dpi)


def stx(k: int) -> str:
    return style.staleness_label(k)


def ci_errorbar(x: Sequence[float]) -> tuple[float, float]:
    """seaborn `errorbar=` callable: the same t-interval the report uses."""
    _, lo, hi, _ = mean_ci(x)
    m = float(np.mean(x))
    return (m, m) if math.isnan(lo) else (lo, hi)


def require(cond: bool, reason: str) -> None:
    if not cond:
        raise SkipFigure(reason)


def smooth_steps(df: pd.DataFrame, cols: list[str], window: int) -> pd.DataFrame:
    if window <= 1:
        return df
    df = df.sort_values(["run_id", "step"]).copy()
    g = df.groupby("run_id", observed=True)
    for c in cols:
        df[c] = g[c].transform(lambda s: s.rolling(window, min_periods=1).mean())
    return df


def step_curves(steps: pd.DataFrame, metrics: list[str], smooth: int = 1) -> pd.DataFrame:
    """Long frame: metric, method, staleness, step -> mean, ci_low, ci_high, n over seeds."""
    present = [m for m in metrics if m in steps.columns]
    df = smooth_steps(steps[[*RUN_COLS, "step", *present]], present, smooth)
    long = df.melt(id_vars=[*RUN_COLS, "step"], value_vars=present, var_name="metric")
    long["value"] = pd.to_numeric(long["value"], errors="coerce")
    out = agg_ci(long, ["metric", "method", "staleness", "step"], "value")
    return out


def line_panels(
    curves: pd.DataFrame,
    panels: list[tuple[str, str]],
    runs: RunSet,
    *,
    ncols: int | None = None,
    title: str = "",
    hlines: dict[str, float] | None = None,
) -> plt.Figure:
    """One axis per (metric, label); colour = method, dash = staleness, band = 95% CI."""
    ncols = ncols or len(panels)
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 2.8 * nrows), squeeze=False)
    palette = style.method_palette(runs.methods)
    levels = sorted(curves["staleness"].unique())
    dashes = {stx(k): d for k, d in style.staleness_dashes(levels).items()}
    hue_order = style.method_order(curves["method"].unique())
    # String levels so the legend reads "staleness: 1x, 2x" rather than bare numbers.
    data = curves.assign(staleness=curves["staleness"].map(stx))
    for ax, (metric, label) in zip(axes.flat, panels, strict=False):
        d = data[data["metric"] == metric]
        if d.empty:
            ax.text(0.5, 0.5, f"no {metric} logged", ha="center", transform=ax.transAxes)
        else:
            sns.lineplot(
                data=d,
                x="step",
                y="mean",
                hue="method",
                style="staleness",
                hue_order=hue_order,
                style_order=[stx(k) for k in levels],
                palette=palette,
                dashes=dashes,
                errorbar=None,
                ax=ax,
            )
            for (m, _), g in d.groupby(["method", "staleness"], observed=True):
                ax.fill_between(
                    g["step"], g["ci_low"], g["ci_high"], color=palette[m], alpha=0.15, lw=0
                )
        if hlines and metric in hlines:
            ax.axhline(hlines[metric], color="0.5", lw=0.8, ls=":")
        ax.set_title(label)
        ax.set_ylabel("")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    finish_legends(fig, axes.flat[: len(panels)])
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def grid(n: int, max_cols: int, w: float, h: float) -> tuple[plt.Figure, list[plt.Axes]]:
    """n panels wrapped into rows of at most max_cols; unused axes hidden."""
    ncols = min(n, max_cols)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(w * ncols, h * nrows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def finish_legends(fig: plt.Figure, axes: Sequence[plt.Axes]) -> None:
    """Keep one legend, outside the last panel; the others repeat it."""
    axes = [ax for ax in axes if ax.get_legend() is not None]
    for ax in axes[:-1]:
        ax.get_legend().remove()
    if axes:
        sns.move_legend(axes[-1], "upper left", bbox_to_anchor=(1.02, 1), frameon=False)


def bar_panel(ax: plt.Axes, df: pd.DataFrame, x: str, y: str, order: list, runs: RunSet) -> None:
    """Seed means as bars, t-interval whiskers, colour = method."""
    palette = style.method_palette(runs.methods)
    sns.barplot(
        data=df,
        x=x,
        y=y,
        hue="method",
        order=order,
        hue_order=style.method_order(df["method"].unique()),
        palette=palette,
        errorbar=ci_errorbar,
        capsize=0.1,
        err_kws={"linewidth": 1},
        ax=ax,
    )
