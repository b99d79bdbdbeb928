"""fresh: the rollout generated at step t trains at step t (the paper's staleness; with k
updates per rollout the lag is 0..k-1 optimizer updates)."""

from __future__ import annotations

from src.schedule.sources._base import Generation, Source, StepData, register


@register
class Fresh(Source):
    name = "fresh"
    help = "train on the rollout generated this step"
    rank = 0

    @property
    def on_policy(self) -> bool:
        return True

    def next(self, gen: Generation) -> StepData:
        generated = gen.rollout(gen.step)
        return StepData(generated, [generated])

    def telemetry(self, step, trained) -> dict:
        return {}
