"""Step-metric figures: curves vs training step (paper Figs 2, 4, 6, 7, 9)."""

from __future__ import annotations

import matplotlib.pyplot as plt

from analysis.claims.paper import ROWS
from analysis.claims.schema import methods_of
from analysis.core.loader import RunSet
from analysis.core.plotting import (
    draw_curves,
    line_panels,
    reference_span,
    step_axis,
    step_curves,
    stx,
    suptitle,
    with_updates,
)
from analysis.figures.contract import FigureResult, Options, require, require_learning, save

# Which runs each figure draws: the methods of the claim rows that cite it
# (analysis/claims/paper.py), never names of its own.
FIG2, FIG4, FIG6 = (methods_of(ROWS, f)[0] for f in ("Fig. 2", "Fig. 4", "Fig. 6"))
PROPOSED, BASE = methods_of(ROWS, "Fig. 9")  # Fig 9: bapo against ppo
# Fig 7: each row's first side is a pair of fixed bounds, compared with the baseline
FIG7_CLIPS = tuple(r.sides[0].cell.method for r in ROWS if r.figure == "Fig. 7")
FIG7_METHODS = methods_of(ROWS, "Fig. 7")
# The paper's Fig. 4 and Fig. 9 readings (docs/methods.md): the negative tokens' share of
# ppo's loss contribution off-policy, and BAPO's positive share.
PAPER_NEG_CONTRIB = (0.55, 0.65)
PAPER_BAPO_POS_CONTRIB = (0.43, 0.46)


def _curves_of(
    runs: RunSet,
    methods: set[str],
    metrics: list[str],
    opts: Options,
    staleness: set[int] | None = None,
    variants: bool = True,
):
    """Curves of the runs whose config method.name is in `methods`. `variants`: with every
    parameter variant of them (each its own colour); False: the plain label only, for
    figures coloured by staleness, where two variants would share a colour."""
    ids = {r.run_id for r in runs.runs
           if (r.method_name if variants else r.method) in methods}
    steps = runs.steps
    mask = steps["run_id"].isin(ids)
    if staleness is not None:
        mask &= steps["staleness"].isin(staleness)
    return step_curves(with_updates(steps[mask], runs), metrics, opts.smooth)


def _levels(runs: RunSet, method: str, variants: bool = True) -> list[int]:
    return sorted({r.staleness for r in runs.runs
                   if (r.method_name if variants else r.method) == method})


def fig02_staleness(runs: RunSet, opts: Options) -> FigureResult:
    """Fig 2: how staleness changes ppo training, one colour per staleness."""
    levels = _levels(runs, FIG2, variants=False)
    require(bool(levels), f"no '{FIG2}' runs")
    panels = [
        ("reward_mean", "reward"),
        ("entropy_mean", "entropy"),
        ("clip_frac", "clip fraction"),
        ("grad_norm", "grad norm"),
    ]
    curves = _curves_of(runs, {FIG2}, [p[0] for p in panels], opts, variants=False)
    fig = line_panels(
        curves,
        panels,
        runs,
        hue="staleness",
        title=f"{FIG2} at staleness " + ", ".join(stx(k) for k in levels),
    )
    name = "fig02_staleness_ppo"
    return FigureResult(name, save(fig, name, opts), curves)


def fig04_contribution(runs: RunSet, opts: Options) -> FigureResult:
    """Fig 4: loss contribution (gradient reading) and token share, by advantage sign."""
    require(any(r.method == FIG4 for r in runs.runs), f"no '{FIG4}' runs")
    require_learning(runs)
    ids = {r.run_id for r in runs.runs if r.method == FIG4}
    steps = runs.steps[runs.steps["run_id"].isin(ids)].copy()
    require("contrib_grad_pos_share" in steps, "no contrib_grad_pos_share in step records")
    # The negative share is the complement: only tokens with A != 0 carry contribution.
    steps["contrib_grad_neg_share"] = 1.0 - steps["contrib_grad_pos_share"]
    panels = [
        ("contrib_grad_pos_share", "loss contribution, A>0"),
        ("contrib_grad_neg_share", "loss contribution, A<0"),
        ("token_share_pos", "token share, A>0"),
        ("token_share_neg", "token share, A<0"),
    ]
    curves = step_curves(with_updates(steps, runs), [p[0] for p in panels], opts.smooth)
    lo, hi = PAPER_NEG_CONTRIB
    fig = line_panels(
        curves,
        panels,
        runs,
        ncols=2,
        hue="staleness",
        title=f"{FIG4}: contribution by advantage sign (dotted: 0.5; hatched: the paper's "
        "off-policy range)",
        hlines={p[0]: 0.5 for p in panels},
        spans={"contrib_grad_neg_share": (lo, hi, f"paper: {lo:g}-{hi:g}"),
               "contrib_grad_pos_share": (1 - hi, 1 - lo, f"paper: {1 - hi:g}-{1 - lo:g}")},
    )
    name = "fig04_contribution_by_sign"
    return FigureResult(name, save(fig, name, opts), curves)


def fig06_length(runs: RunSet, opts: Options) -> FigureResult:
    """Fig 6: mean response length of positive vs negative responses."""
    require(any(r.method == FIG6 for r in runs.runs), f"no '{FIG6}' runs")
    require_learning(runs)
    panels = [
        ("response_length_pos", "response length, A>0"),
        ("response_length_neg", "response length, A<0"),
    ]
    curves = _curves_of(runs, {FIG6}, [p[0] for p in panels], opts, variants=False)
    require(not curves.empty, "no response_length_pos/neg values in step records")
    fig = line_panels(curves, panels, runs, hue="staleness", sharey=True,
                      title=f"{FIG6}: response length by advantage sign (one y scale)")
    name = "fig06_length_by_sign"
    return FigureResult(name, save(fig, name, opts), curves)


def fig07_asymmetric(runs: RunSet, opts: Options, staleness: int = 4) -> FigureResult:
    """Fig 7: fixed asymmetric clip bounds vs ppo at one staleness; the clip fraction shows
    how often each pair of bounds binds."""
    have = {r.method_name for r in runs.runs if r.staleness == staleness}
    require(
        bool(have & set(FIG7_CLIPS)),
        f"no runs named {' or '.join(FIG7_CLIPS)} at {staleness}x",
    )
    panels = [("reward_mean", "reward"), ("entropy_mean", "entropy"),
              ("clip_frac", "clip fraction (no-gradient tokens)")]
    curves = _curves_of(runs, set(FIG7_METHODS), [p[0] for p in panels], opts, {staleness})
    fig = line_panels(curves, panels, runs,
                      title=f"fixed clip bounds [c_low, c_high] at {staleness}x")
    relabel_legend(fig, method_labels(runs, set(FIG7_METHODS), staleness))
    fig.tight_layout()  # again: the legend's labels grew, and it sits beside the panels
    name = "fig07_asymmetric_clips"
    return FigureResult(name, save(fig, name, opts), curves)


def method_labels(runs: RunSet, methods: set[str], staleness: int) -> dict[str, str]:
    """Legend text per method label: 'ppo [0.8, 1.2], 3 seeds' (its bounds and seed count)."""
    out = {}
    for r in runs.runs:
        if r.method_name in methods and r.staleness == staleness and r.method not in out:
            seeds = sum(1 for o in runs.runs if o.method == r.method and o.staleness == staleness)
            lo, hi = r.method_param("c_low"), r.method_param("c_high")
            bounds = f" [{lo:g}, {hi:g}]" if lo is not None and hi is not None else ""
            out[r.method] = f"{r.method}{bounds}, {seeds} seed{'s' if seeds != 1 else ''}"
    return out


def relabel_legend(fig: plt.Figure, labels: dict[str, str]) -> None:
    for ax in fig.axes:
        if ax.get_legend() is not None:
            for text in ax.get_legend().get_texts():
                text.set_text(labels.get(text.get_text(), text.get_text()))


FIG9_PANELS = [
    ("reward_mean", "reward (0-1)"),
    ("entropy_mean", "entropy (nats/token)"),
    ("contrib_grad_pos_share", "positive share of |r·A|"),
    ("grad_norm", "grad norm (L2, pre-clip)"),
]


def fig09_bapo_vs_ppo(runs: RunSet, opts: Options) -> FigureResult:
    """Fig 9: bapo vs ppo, one column per staleness both were run at, one row per metric;
    the positive-contribution row marks bapo's target rho0."""
    by = {m: set(_levels(runs, m)) for m in (PROPOSED, BASE)}
    both = sorted(by[PROPOSED] & by[BASE])
    require(bool(both), f"no staleness with both '{PROPOSED}' and '{BASE}' runs")
    require_learning(runs)
    curves = _curves_of(runs, {PROPOSED, BASE}, [p[0] for p in FIG9_PANELS], opts, set(both))
    rho0 = sorted({r.method_param(r.traits.target) for r in runs.runs
                   if r.method_name == PROPOSED and r.traits.target is not None
                   and r.method_param(r.traits.target) is not None})
    nrows, ncols = len(FIG9_PANELS), len(both)
    x, x_label = step_axis(runs)
    fig, axes = plt.subplots(nrows, ncols, figsize=(2.9 * ncols + 1.8, 2.1 * nrows),
                             squeeze=False, sharex=True, sharey="row")
    for i, (metric, label) in enumerate(FIG9_PANELS):
        for j, k in enumerate(both):
            ax = axes[i, j]
            d = curves[(curves["metric"] == metric) & (curves["staleness"] == k)]
            draw_curves(ax, d, runs, dashed=False, x=x)
            if metric == "contrib_grad_pos_share":
                lo, hi = PAPER_BAPO_POS_CONTRIB
                reference_span(ax, lo, hi, f"paper: bapo {lo:g}-{hi:g}")
                for r in rho0:
                    ax.axhline(r, color="0.3", lw=0.9, ls="--", label=f"bapo rho0 = {r:g}")
            if i == 0:
                same = " (same updates: lines coincide)" if k == 1 else ""
                ax.set_title(f"staleness {stx(k)}{same}", fontsize=9)
            ax.set_ylabel(label if j == 0 else "")
            # one x label under the whole grid: per column, the update-axis label of two
            # narrow columns ran into each other
            ax.set_xlabel(x_label if i == nrows - 1 and ncols == 1 else "")
            if ax.get_legend() is not None:
                ax.get_legend().remove()
    if ncols > 1:
        fig.supxlabel(x_label, fontsize=10)
    handles, labels = axes[2, -1].get_legend_handles_labels()
    keep = [(h, lab) for h, lab in zip(handles, labels, strict=True)
            if lab not in ("method", "staleness") and not lab.endswith("x")]
    fig.legend(*zip(*keep, strict=True), loc="center right", frameon=False)
    suptitle(fig, "bapo vs ppo; mean over seeds, band: 95% t-interval (clipped to the "
             "metric's range)")
    fig.tight_layout(rect=(0, 0, 1 - 1.9 / fig.get_figwidth(), 1))
    name = "fig09_bapo_vs_ppo"
    return FigureResult(name, save(fig, name, opts), curves, {"rho0": rho0})


