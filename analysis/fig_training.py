"""Step-metric figures: curves vs training step (paper Figs 2, 4, 6, 7, 9)."""

from __future__ import annotations

from analysis import style
from analysis.loader import RunSet
from analysis.plotting import FigureResult, Options, line_panels, require, save, step_curves

BASE = "ppo"  # the paper's GRPO baseline


def _curves_of(
    runs: RunSet,
    methods: set[str],
    metrics: list[str],
    opts: Options,
    staleness: set[int] | None = None,
):
    steps = runs.steps
    mask = steps["method"].isin(methods)
    if staleness is not None:
        mask &= steps["staleness"].isin(staleness)
    return step_curves(steps[mask], metrics, opts.smooth)


def fig02_staleness(runs: RunSet, opts: Options) -> FigureResult:
    """Fig 2: how staleness changes ppo training, one line per staleness."""
    levels = sorted({r.staleness for r in runs.runs if r.method == BASE})
    require(bool(levels), f"no '{BASE}' runs")
    panels = [
        ("reward_mean", "reward"),
        ("entropy_mean", "entropy"),
        ("clip_frac", "clip fraction"),
        ("grad_norm", "grad norm"),
    ]
    curves = _curves_of(runs, {BASE}, [p[0] for p in panels], opts)
    fig = line_panels(
        curves,
        panels,
        runs,
        title=f"{BASE} at staleness " + ", ".join(style.staleness_label(k) for k in levels),
    )
    name = "fig02_staleness_ppo"
    return FigureResult(name, save(fig, name, opts), curves)


def fig04_contribution(runs: RunSet, opts: Options) -> FigureResult:
    """Fig 4: loss contribution (gradient reading) and token share, by advantage sign."""
    require(any(r.method == BASE for r in runs.runs), f"no '{BASE}' runs")
    steps = runs.steps[runs.steps["method"] == BASE].copy()
    require("contrib_grad_pos_share" in steps, "no contrib_grad_pos_share in step records")
    # The negative share is the complement: only tokens with A != 0 carry contribution.
    steps["contrib_grad_neg_share"] = 1.0 - steps["contrib_grad_pos_share"]
    panels = [
        ("contrib_grad_pos_share", "loss contribution, A>0"),
        ("contrib_grad_neg_share", "loss contribution, A<0"),
        ("token_share_pos", "token share, A>0"),
        ("token_share_neg", "token share, A<0"),
    ]
    curves = step_curves(steps, [p[0] for p in panels], opts.smooth)
    fig = line_panels(
        curves,
        panels,
        runs,
        ncols=2,
        title=f"{BASE}: contribution by sign",
        hlines={p[0]: 0.5 for p in panels},
    )
    name = "fig04_contribution_by_sign"
    return FigureResult(name, save(fig, name, opts), curves)


def fig06_length(runs: RunSet, opts: Options) -> FigureResult:
    """Fig 6: mean response length of positive vs negative responses."""
    require(any(r.method == BASE for r in runs.runs), f"no '{BASE}' runs")
    panels = [
        ("response_length_pos", "response length, A>0"),
        ("response_length_neg", "response length, A<0"),
    ]
    curves = _curves_of(runs, {BASE}, [p[0] for p in panels], opts)
    require(not curves.empty, "no response_length_pos/neg values in step records")
    fig = line_panels(curves, panels, runs, title=f"{BASE}: response length by sign")
    name = "fig06_length_by_sign"
    return FigureResult(name, save(fig, name, opts), curves)


FIG7_METHODS = ("clip_0.8_1.5", "ppo", "clip_0.5_1.2")


def fig07_asymmetric(runs: RunSet, opts: Options, staleness: int = 4) -> FigureResult:
    """Fig 7: fixed asymmetric clip bounds vs ppo at one staleness."""
    have = {r.method for r in runs.runs if r.staleness == staleness}
    require(
        bool(have & {"clip_0.8_1.5", "clip_0.5_1.2"}),
        f"no runs named clip_0.8_1.5 or clip_0.5_1.2 at {staleness}x",
    )
    panels = [("reward_mean", "reward"), ("entropy_mean", "entropy")]
    curves = _curves_of(runs, set(FIG7_METHODS), [p[0] for p in panels], opts, {staleness})
    fig = line_panels(curves, panels, runs, title=f"fixed asymmetric clips at {staleness}x")
    name = "fig07_asymmetric_clips"
    return FigureResult(name, save(fig, name, opts), curves)


def fig09_bapo_vs_ppo(runs: RunSet, opts: Options) -> FigureResult:
    """Fig 9: bapo vs ppo at every staleness both were run at."""
    by = {m: {r.staleness for r in runs.runs if r.method == m} for m in ("bapo", BASE)}
    both = by["bapo"] & by[BASE]
    require(bool(both), f"no staleness with both 'bapo' and '{BASE}' runs")
    panels = [
        ("reward_mean", "reward"),
        ("entropy_mean", "entropy"),
        ("contrib_grad_pos_share", "positive contribution"),
        ("grad_norm", "grad norm"),
    ]
    curves = _curves_of(runs, {"bapo", BASE}, [p[0] for p in panels], opts, both)
    fig = line_panels(curves, panels, runs, ncols=4, title="bapo vs ppo")
    name = "fig09_bapo_vs_ppo"
    return FigureResult(name, save(fig, name, opts), curves)
