"""Shared drawing machinery: mean-with-band line panels, bar panels, axes and legends (the
figure contract itself is analysis/figures/contract.py)."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.ticker import MaxNLocator

from analysis.core import style
from analysis.core.cells import one_update_budget
from analysis.core.final import updates_per_step
from analysis.core.loader import RUN_COLS, Run, RunSet
from analysis.core.stats import agg_ci, mean_ci


def stx(k: int) -> str:
    return style.staleness_label(k)


def ci_errorbar(x: Sequence[float], lower: float | None = None,
                upper: float | None = None) -> tuple[float, float]:
    """seaborn `errorbar=` callable: the same t-interval the report uses, clipped to the
    range the value can take (a share cannot go below 0)."""
    _, lo, hi, _ = mean_ci(x)
    m = float(np.mean(x))
    lo, hi = (m, m) if math.isnan(lo) else (lo, hi)
    if lower is not None:
        lo, hi = max(lo, lower), max(hi, lower)
    if upper is not None:
        lo, hi = min(lo, upper), min(hi, upper)
    return lo, hi


def sample_note(runs: Iterable[Run]) -> str:
    """What share of responses the token rows hold: exported runs keep a seeded sample of
    whole responses (meta.json `export.response_fraction`)."""
    fractions = sorted({r.token_sample_fraction for r in runs if r.token_sample_fraction})
    if not fractions:
        return "token rows of every response"
    shares = "/".join(f"1 in {round(1 / f):d}" if f > 0 and abs(1 / f - round(1 / f)) < 1e-6
                      else f"{f:g}" for f in fractions)
    return f"token rows of a seeded sample of {shares} responses (the export's sample)"


def wrapped(text: str, fig: plt.Figure, fontsize: float) -> str:
    """`text` with each line wrapped to the figure's width, so a title is never cut at the
    edges of a narrow figure (one panel of a small suite)."""
    # An average glyph of the default sans font is ~0.55 em wide.
    width = max(20, int(fig.get_figwidth() * 72 / (0.55 * fontsize)))
    return "\n".join(textwrap.fill(line, width) if line else line
                      for line in text.split("\n"))


def suptitle(fig: plt.Figure, text: str, fontsize: float = 10) -> None:
    fig.suptitle(wrapped(text, fig, fontsize), fontsize=fontsize)


def smooth_steps(df: pd.DataFrame, cols: list[str], window: int) -> pd.DataFrame:
    if window <= 1:
        return df
    df = df.sort_values(["run_id", "step"]).copy()
    g = df.groupby("run_id", observed=True)
    for c in cols:
        df[c] = g[c].transform(lambda s: s.rolling(window, min_periods=1).mean())
    return df


# Axis labels with units, and the range a metric can take (bands are clipped to it: a
# t-interval over 3 seeds can reach far past what the metric allows).
STEP_AXIS = "training step (rollout batches)"
UPDATE_AXIS = "optimizer updates"  # steps x updates per step; a longer label ran into the next panel's
METRIC_AXES: dict[str, tuple[str, float | None, float | None]] = {
    "reward_mean": ("mean reward (0-1)", 0.0, 1.0),
    "accuracy": ("accuracy (share correct)", 0.0, 1.0),
    "entropy_mean": ("entropy (nats/token)", 0.0, None),
    "clip_frac": ("clipped share of tokens", 0.0, 1.0),
    "grad_norm": ("grad norm (L2, before clipping)", 0.0, None),
    "contrib_grad_pos_share": ("share of sum |r·A| (0-1)", 0.0, 1.0),
    "contrib_grad_neg_share": ("share of sum |r·A| (0-1)", 0.0, 1.0),
    "token_share_pos": ("share of tokens with A≠0", 0.0, 1.0),
    "token_share_neg": ("share of tokens with A≠0", 0.0, 1.0),
    "response_length_pos": ("response length (tokens)", 0.0, None),
    "response_length_neg": ("response length (tokens)", 0.0, None),
    "c_low": ("c_low (IS-ratio bound)", 0.0, None),
    "c_high": ("c_high (IS-ratio bound)", 0.0, None),
}


def with_updates(frame: pd.DataFrame, runs: RunSet) -> pd.DataFrame:
    """`frame` (rows with run_id and step) plus `updates`: the optimizer updates made before
    that step, step x the run's updates per step (k at kx), as the trainer counts them."""
    per_step = {r.run_id: updates_per_step(r) for r in runs.runs}
    return frame.assign(updates=[int(s) * per_step[r] for r, s
                                 in zip(frame["run_id"], frame["step"], strict=True)])


def step_axis(runs: RunSet) -> tuple[str, str]:
    """(column, label) of the x axis of curves over training: optimizer updates where the
    staleness levels ran one update budget in different step counts (a suite at equal
    updates: 120 steps at 1x, 30 at 4x), so their curves line up and a 4x curve is not
    squeezed into a quarter of the axis; else steps."""
    budgets = {(int(r.cfg("train.steps", 0) or 0), updates_per_step(r),
                int(r.cfg("eval.every", 0) or 0)) for r in runs.runs}
    if one_update_budget(budgets):
        return "updates", UPDATE_AXIS
    return "step", STEP_AXIS


def step_curves(steps: pd.DataFrame, metrics: list[str], smooth: int = 1) -> pd.DataFrame:
    """Long frame: metric, method, staleness, step (and updates, when `steps` has them: see
    with_updates) -> mean, ci_low, ci_high, n over seeds, and band_low/band_high: the
    interval clipped to the metric's range (what is drawn)."""
    present = [m for m in metrics if m in steps.columns]
    at = ["step", "updates"] if "updates" in steps.columns else ["step"]
    df = smooth_steps(steps[[*RUN_COLS, *at, *present]], present, smooth)
    long = df.melt(id_vars=[*RUN_COLS, *at], value_vars=present, var_name="metric")
    long["value"] = pd.to_numeric(long["value"], errors="coerce")
    out = agg_ci(long, ["metric", "method", "staleness", *at], "value")
    return clip_bands(out)


def clip_bands(curves: pd.DataFrame, ranges: dict[str, tuple] | None = None) -> pd.DataFrame:
    """band_low/band_high = ci_low/ci_high clipped to each metric's range (or `ranges`)."""
    out = curves.copy()
    out["band_low"], out["band_high"] = out["ci_low"], out["ci_high"]
    for metric, (lo, hi) in {**{m: a[1:] for m, a in METRIC_AXES.items()}, **(ranges or {})}.items():
        rows = out["metric"] == metric
        out.loc[rows, "band_low"] = out.loc[rows, "band_low"].clip(lower=lo, upper=hi)
        out.loc[rows, "band_high"] = out.loc[rows, "band_high"].clip(lower=lo, upper=hi)
    return out


def axis_label(metric: str) -> str:
    return METRIC_AXES.get(metric, (metric, None, None))[0]


def line_panels(
    curves: pd.DataFrame,
    panels: list[tuple[str, str]],
    runs: RunSet,
    *,
    ncols: int | None = None,
    title: str = "",
    hlines: dict[str, float] | None = None,
    spans: dict[str, tuple[float, float, str]] | None = None,
    hue: str = "method",
    sharey: bool = False,
) -> plt.Figure:
    """One axis per (metric, title); band = 95% CI clipped to the metric's range.
    `spans`: metric -> (low, high, text), a reference range drawn hatched and labelled.

    hue="method": colour = method, dash = staleness. hue="staleness" (one method): colour
    and dash both = staleness, so every staleness level has its own colour.
    """
    ncols = ncols or len(panels)
    nrows = math.ceil(len(panels) / ncols)
    x, x_label = step_axis(runs) if "updates" in curves.columns else ("step", STEP_AXIS)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 2.9 * nrows), squeeze=False,
                             sharey=sharey)
    for ax, (metric, label) in zip(axes.flat, panels, strict=False):
        ax.tick_params(labelleft=True)
        draw_curves(ax, curves[curves["metric"] == metric], runs, hue=hue, x=x)
        if hlines and metric in hlines:
            ax.axhline(hlines[metric], color="0.5", lw=0.8, ls=":")
        if spans and metric in spans:
            reference_span(ax, *spans[metric])
        ax.set_title(label)
        ax.set_ylabel(axis_label(metric))
        ax.set_xlabel(x_label)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    finish_legends(fig, axes.flat[: len(panels)])
    suptitle(fig, f"{title}\n{BAND_NOTE}" if title else BAND_NOTE)
    fig.tight_layout()
    return fig


REFERENCE_COLOR = "#E69F00"  # the paper's numbers, in every figure that shows them


def reference_span(ax: plt.Axes, low: float, high: float, text: str) -> None:
    """A range the paper reports, hatched, its text inside the panel's top-left corner."""
    ax.axhspan(low, high, facecolor="none", edgecolor=REFERENCE_COLOR, hatch="///", lw=0,
               label=text)
    ax.text(0.02, 0.97, text, transform=ax.transAxes, va="top", fontsize=7,
            color="#9A6A00", bbox={"facecolor": "white", "alpha": 0.8, "lw": 0, "pad": 1})


BAND_NOTE = "lines: mean over seeds; bands: 95% Student-t interval, clipped to the metric's range"


def draw_curves(ax: plt.Axes, d: pd.DataFrame, runs: RunSet, *, hue: str = "method",
                dashed: bool = True, x: str = "step") -> None:
    """Mean lines and clipped bands of one metric's curves (a step_curves slice) against
    `x` (step, or updates: see step_axis); `dashed`: a dash pattern per staleness (off when
    each panel holds one staleness)."""
    if d.empty:
        ax.text(0.5, 0.5, "not logged", ha="center", transform=ax.transAxes)
        return
    levels = sorted(d["staleness"].unique())
    dashes = {stx(k): v if dashed else "" for k, v in style.staleness_dashes(levels).items()}
    data = d.assign(staleness=d["staleness"].map(stx))
    if hue == "staleness":
        palette = {stx(k): c for k, c in style.staleness_palette(levels).items()}
        colour = lambda m, k: palette[k]  # noqa: E731
        hue_kw = {"hue": "staleness", "hue_order": [stx(k) for k in levels], "palette": palette}
    else:
        palette = style.method_palette(runs.methods)
        colour = lambda m, k: palette[m]  # noqa: E731
        hue_kw = {"hue": "method", "hue_order": style.method_order(d["method"].unique()),
                  "palette": palette}
    styled = {"style": "staleness", "style_order": [stx(k) for k in levels],
              "dashes": dashes} if len(levels) > 1 else {}
    sns.lineplot(data=data, x=x, y="mean", errorbar=None, ax=ax, **styled, **hue_kw)
    for (m, k), g in data.groupby(["method", "staleness"], observed=True):
        ax.fill_between(g[x], g["band_low"], g["band_high"], color=colour(m, k),
                        alpha=0.15, lw=0)
    whole_number_ticks(ax)


def whole_number_ticks(ax: plt.Axes) -> None:
    """Steps or updates on the x axis of a curve over training: whole numbers, as many as the
    axis width holds (a fixed count on a narrow panel ran 105 into 120)."""
    ax.xaxis.set_major_locator(MaxNLocator(nbins="auto", integer=True))


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


def bar_panel(ax: plt.Axes, df: pd.DataFrame, x: str, y: str, order: list, runs: RunSet,
              bounds: tuple[float | None, float | None] = (None, None)) -> None:
    """Seed means as bars, t-interval whiskers (clipped to `bounds`), colour = method."""
    palette = style.method_palette(runs.methods)
    sns.barplot(
        data=df,
        x=x,
        y=y,
        hue="method",
        order=order,
        hue_order=style.method_order(df["method"].unique()),
        palette=palette,
        errorbar=lambda v: ci_errorbar(v, *bounds),
        capsize=0.1,
        err_kws={"linewidth": 1},
        ax=ax,
    )


def shared_legend(fig: plt.Figure, axes: list[plt.Axes]) -> None:
    """One legend beside the panels with every method of any panel (panels at different
    staleness hold different methods), in the canonical order."""
    found: dict[str, object] = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            found.setdefault(label, h)
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    order = style.method_order(found)
    fig.legend([found[m] for m in order], order, title="method", loc="center right",
               frameon=False)
