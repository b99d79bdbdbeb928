"""Sources of training data: which rollouts a step trains on, and when each is generated.

- fresh: the rollout generated at step t trains at step t (the paper's staleness; with k
  updates per rollout the lag is 0..k-1 optimizer updates).
- delay (M2PO's FIFO): the rollout trained at step t was generated at step t - K. The first
  K steps train on rollouts of the initial weights, generated before step 0 (start
  `initial`), or each on a rollout its own weights generate just before it (start `fresh`:
  those K steps are on-policy, then the lag jumps to K steps). With k updates per rollout
  the lag is K*k .. K*k + k - 1 updates.
- replay: a buffer of the last C rollouts; each step trains on the fresh rollout plus R
  rollouts drawn from the buffer without replacement (seeded by the step).
- partial: a per-step token budget; unfinished responses continue at the next step under
  the new weights (src/schedule/partial.py).

A rollout's slot is the step whose problems and sampling seed it holds; it is trained at
step == slot under delay, so runs at different lags see the same prompts at the same step.
Each source's state (queue, buffer) travels in the checkpoint.
"""

from __future__ import annotations

from collections import deque

import torch

from src.schedule.stored import StoredRollout

SOURCES = ("fresh", "delay", "replay", "partial")
DELAY_STARTS = ("initial", "fresh")


class Source:
    name = "fresh"

    def early_slots(self, step: int) -> list[int]:
        """Slots generated at `step` before its own rollout (the queue's start), by the
        weights of that moment."""
        return []

    def generated_slot(self, step: int) -> int:
        """The slot of the rollout generated at `step`."""
        return step

    def push_early(self, rollout: StoredRollout) -> None:
        raise RuntimeError(f"source {self.name} generates no early slots")

    def trained(self, step: int, generated: StoredRollout, seed: int) -> list[StoredRollout]:
        """The rollouts step `step` trains on, `generated` having just been generated."""
        return [generated]

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def in_flight(self) -> list[StoredRollout]:
        """Rollouts held for later steps (what a checkpoint carries)."""
        return []


class Fresh(Source):
    pass


class Delay(Source):
    name = "delay"

    def __init__(self, steps: int, start: str = "initial"):
        if start not in DELAY_STARTS:
            raise ValueError(f"delay start must be one of {DELAY_STARTS}, got {start!r}")
        self.steps, self.start = steps, start
        self.queue: deque[StoredRollout] = deque()

    def early_slots(self, step: int) -> list[int]:
        # initial: slots 0..K-1 all before step 0, by the initial weights; fresh: slot t at
        # step t < K, by step t's weights, so step t trains on its own policy's rollout.
        if self.start == "initial":
            return list(range(self.steps)) if step == 0 else []
        return [step] if step < self.steps else []

    def generated_slot(self, step: int) -> int:
        return step + self.steps

    def push_early(self, rollout: StoredRollout) -> None:
        self.queue.append(rollout)

    def trained(self, step: int, generated: StoredRollout, seed: int) -> list[StoredRollout]:
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


class Replay(Source):
    name = "replay"

    def __init__(self, capacity: int, draws: int):
        self.capacity, self.draws = capacity, draws
        self.buffer: deque[StoredRollout] = deque(maxlen=capacity)

    def trained(self, step: int, generated: StoredRollout, seed: int) -> list[StoredRollout]:
        """The fresh rollout first, then min(R, buffer size) draws from the buffer as it was
        before this step (oldest first in the buffer; the draw order is the seeded one)."""
        n = min(self.draws, len(self.buffer))
        gen = torch.Generator().manual_seed(seed)
        picks = torch.randperm(len(self.buffer), generator=gen)[:n].tolist()
        drawn = [self.buffer[i] for i in picks]
        self.buffer.append(generated)
        return [generated, *drawn]

    def state_dict(self) -> dict:
        return {"buffer": list(self.buffer)}

    def load_state_dict(self, state: dict) -> None:
        self.buffer = deque(state["buffer"], maxlen=self.capacity)

    def in_flight(self) -> list[StoredRollout]:
        return list(self.buffer)


def build_source(offpolicy) -> Source:
    """The source an `offpolicy` config section asks for (validated before)."""
    if offpolicy.source == "delay":
        return Delay(offpolicy.delay, offpolicy.delay_start or "initial")
    if offpolicy.source == "replay":
        return Replay(offpolicy.replay_capacity, offpolicy.replay_draws)
    if offpolicy.source == "partial":
        from src.schedule.partial import Partial  # it subclasses Source

        return Partial(offpolicy.token_budget, bool(offpolicy.mask_stale_prefix))
    return Fresh()
