"""Fig 8: the bounds BAPO chose at each step, inside the range it may move them in."""

from __future__ import annotations

import pandas as pd

from analysis.loader import Run, RunSet
from analysis.plotting import FigureResult, Options, line_panels, require, save, step_curves

RANGE_KEYS = ("low_start", "low_max", "high_start", "high_max")


def is_bapo(run: Run) -> bool:
    # Ablations (bapo_official, bapo_value) share the objective; plot them alongside.
    return run.cfg("method.objective") == "bapo" or run.method.startswith("bapo")


def bound_ranges(runs: list[Run]) -> pd.DataFrame:
    """Distinct movable ranges [start, max] of c_low and c_high found in the configs."""
    rows = [{k: r.cfg(f"method.bapo.{k}") for k in RANGE_KEYS} for r in runs]
    df = pd.DataFrame(rows, columns=list(RANGE_KEYS)).dropna().drop_duplicates()
    return df.astype(float).reset_index(drop=True)


def fig08_bapo_bounds(runs: RunSet, opts: Options) -> FigureResult:
    chosen = runs.select(is_bapo)
    require(bool(chosen), "no bapo runs (method.objective bapo)")
    ids = {r.run_id for r in chosen}
    steps = runs.steps[runs.steps["run_id"].isin(ids)]
    require({"c_low", "c_high"} <= set(steps.columns), "no c_low/c_high in step records")
    curves = step_curves(steps, ["c_high", "c_low"], opts.smooth)
    fig = line_panels(
        curves,
        [("c_high", "c_high"), ("c_low", "c_low")],
        runs,
        title="BAPO bounds (shaded: movable range from the config)",
    )
    ranges = bound_ranges(chosen)
    for ax, (lo, hi) in zip(
        fig.axes[:2], [("high_start", "high_max"), ("low_start", "low_max")], strict=True
    ):
        for _, r in ranges.iterrows():
            ax.axhspan(r[lo], r[hi], color="0.5", alpha=0.12, lw=0)
    name = "fig08_bapo_bounds"
    return FigureResult(name, save(fig, name, opts), curves, {"ranges": ranges})
