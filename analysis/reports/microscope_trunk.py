"""What a microscope study's trunk records say of each branched state: how spread the policy
was on the trunk's own responses (its step records) and on the mini-batch an update trains
on (its update records). Empty where a study dir holds no trunk metrics (a snapshot of a
running study)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from src.run_files import has_metrics, metrics_records


def trunk_entropies(trunk: Path) -> tuple[dict[int, float], dict[tuple[int, int], float]]:
    """(rollout -> the mean entropy over the rollout's response tokens, (rollout, update) ->
    the mean entropy over that update's mini-batch tokens): the step and update records'
    entropy_mean."""
    if not has_metrics(trunk):
        return {}, {}
    rollouts, updates = {}, {}
    for r in metrics_records(trunk):
        if r.get("entropy_mean") is None:
            continue
        if r.get("kind") == "step":
            rollouts[r["step"]] = r["entropy_mean"]
        elif r.get("kind") == "update":
            updates[(r["step"], r["update"])] = r["entropy_mean"]
    return rollouts, updates


def with_trunk_entropies(branches: pd.DataFrame, trunk: Path) -> pd.DataFrame:
    """`branches` (one study's) with `trunk_entropy` and `minibatch_entropy` per row."""
    rollouts, updates = trunk_entropies(trunk)
    states = zip(branches["rollout"], branches["update"], strict=True)
    return branches.assign(trunk_entropy=branches["rollout"].map(rollouts).astype(float),
                           minibatch_entropy=[updates.get(s, float("nan")) for s in states])
