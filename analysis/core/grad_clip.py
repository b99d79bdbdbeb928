"""How often gradient-norm clipping bound: a confound for every comparison of methods.

The trainer clips the total gradient norm at `train.grad_clip`. Where that binds, the step
is shorter than the objective asked for, whatever the method; so two cells whose shares
differ can differ for that reason alone. Update records log `grad_norm` (the total norm
before clipping); an update was clipped iff grad_norm > grad_clip. Newer runs also log a
per-update `grad_clipped` flag, which is read where present.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.core.loader import RunSet

# Shares that differ by at least this much are named as a possible confound in a claim.
NOTABLE_GAP = 0.05


def clipped_flags(updates: pd.DataFrame, grad_clip: dict[str, float]) -> pd.Series:
    """Per update row: 1.0 when its gradient norm was clipped, 0.0 when not, NaN when
    unknown (skipped update, no norm, or the run has no grad_clip). `grad_clip` maps
    run_id to the run's train.grad_clip."""
    limit = updates["run_id"].map(grad_clip).astype(float)
    if "grad_norm" in updates:
        norm = pd.to_numeric(updates["grad_norm"], errors="coerce")
        flags = (norm > limit).astype(float).where(norm.notna() & limit.notna())
    else:
        flags = pd.Series(np.nan, index=updates.index)
    if "grad_clipped" in updates:  # the logged flag, where a run has it, wins
        logged = updates["grad_clipped"].map({True: 1.0, False: 0.0}).astype(float)
        flags = logged.where(logged.notna(), flags)
    if "skipped" in updates:  # a skipped update took no step: left out of the share
        flags = flags.where(~updates["skipped"].fillna(False).astype(bool))
    return flags


def grad_clip_share(runs: RunSet) -> pd.Series:
    """Per run_id: the share of its applied updates whose gradient norm was clipped."""
    u = runs.updates
    if u.empty:
        return pd.Series(dtype=float)
    limits = {r.run_id: _limit(r.cfg("train.grad_clip")) for r in runs.runs}
    flags = clipped_flags(u, limits)
    return flags.groupby(u["run_id"], observed=True).mean()


def _limit(value) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return math.nan
    return x if x > 0 else math.nan  # 0 or negative: no clipping configured


def confound_note(share_a: pd.Series, share_b: pd.Series, names: tuple[str, str]) -> str:
    """'gradient-norm clipping binds on 23% (ppo) vs 2% (bapo) of updates' when the mean
    shares of two cells differ by NOTABLE_GAP or more; '' otherwise."""
    a, b = share_a.mean(), share_b.mean()
    if math.isnan(a) or math.isnan(b) or abs(a - b) < NOTABLE_GAP:
        return ""
    return (f"confound: gradient-norm clipping binds on {a:.0%} ({names[0]}) vs {b:.0%} "
            f"({names[1]}) of updates")
