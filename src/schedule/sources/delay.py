"""delay (M2PO's FIFO): the rollout trained at step t was generated at step t - K.

The first K steps train on rollouts of the initial weights, generated before step 0
(start `initial`), or each on a rollout its own weights generate just before it (start
`fresh`: those K steps are on-policy, then the lag jumps to K steps). With k updates per
rollout the lag is K*k .. K*k + k - 1 updates. Slot s is trained at step s whatever K, so
runs at different lags see the same prompts at the same step. A rollout queued for a later
step gets its behaviour pass now, by the weights that generated it, on the mini-batch
tensors of the step that will train it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from src.config_fields import at_least, one_of, setting
from src.schedule.sources._base import (
    Generation,
    Source,
    SourceParams,
    StepData,
    register,
    required,
)
from src.schedule.stored import StoredRollout

DELAY_STARTS = ("initial", "fresh")


@dataclass
class DelayParams(SourceParams):
    delay: int | None = setting(
        None, "K steps between generating a rollout and training on it (lag in updates: "
        "K*k .. K*k+k-1)",
        required("delay", "the steps between generating a rollout and training on it (0 = fresh)",
                 at_least(0, "steps of lag")))
    delay_start: str | None = setting(
        None, "where the queue's first K steps get their data: initial (null; rollouts of the "
        "initial weights, made before step 0, as M2PO's queue) | fresh (step t < K trains on a "
        "rollout its own weights just made, on-policy; the lag jumps to K steps at step K)",
        one_of((None, *DELAY_STARTS), f"one of {list(DELAY_STARTS)} (or null: initial)"))


@register
class Delay(Source):
    name = "delay"
    help = "on the one generated `delay` steps ago (M2PO's queue)"
    rank = 1
    Params = DelayParams

    def __init__(self, steps: int, start: str = "initial"):
        if start not in DELAY_STARTS:
            raise ValueError(f"delay start must be one of {DELAY_STARTS}, got {start!r}")
        self.steps, self.start = steps, start
        self.queue: deque[StoredRollout] = deque()

    @classmethod
    def from_params(cls, params: DelayParams) -> Delay:
        return cls(params.delay, params.delay_start or "initial")

    @property
    def on_policy(self) -> bool:
        return self.steps == 0

    def next(self, gen: Generation) -> StepData:
        for slot in self.early_slots(gen.step):
            early = gen.rollout(slot)
            gen.behaviour_now(early)
            self.push_early(early)
        generated = gen.rollout(self.generated_slot(gen.step))
        trained = self.trained(gen.step, generated, seed=gen.seed(2))
        if not any(r is generated for r in trained):  # K > 0: queued for step slot
            gen.behaviour_now(generated)
        return StepData(generated, trained)

    def early_slots(self, step: int) -> list[int]:
        """Slots generated at `step` before its own rollout (the queue's start), by the
        weights of that moment: initial: slots 0..K-1 all before step 0, by the initial
        weights; fresh: slot t at step t < K, by step t's weights, so step t trains on its
        own policy's rollout."""
        if self.start == "initial":
            return list(range(self.steps)) if step == 0 else []
        return [step] if step < self.steps else []

    def generated_slot(self, step: int) -> int:
        """The slot of the rollout generated at `step`."""
        return step + self.steps

    def push_early(self, rollout: StoredRollout) -> None:
        self.queue.append(rollout)

    def trained(self, step: int, generated: StoredRollout, seed: int) -> list[StoredRollout]:
        """The rollout step `step` trains on, `generated` having just been queued."""
        self.queue.append(generated)
        # a fresh start pushes slot t after slot t + K - 1, so take the lowest slot
        oldest = min(self.queue, key=lambda r: r.slot)
        self.queue.remove(oldest)
        if oldest.slot != step:
            raise RuntimeError(f"delay queue out of order: step {step} found slot {oldest.slot}")
        return [oldest]

    def state_dict(self) -> dict:
        return {"queue": list(self.queue)}

    def load_state_dict(self, state: dict) -> None:
        self.queue = deque(state["queue"])

    def in_flight(self) -> list[StoredRollout]:
        return list(self.queue)
