"""replay: a buffer of the last C rollouts; each step trains on the fresh rollout plus R
rollouts drawn from the buffer without replacement (seeded by the step), shuffled together
into (1+R) k mini-batches of the usual size. The fresh rows get their behaviour pass in the
step's own mini-batches and are stored with the rollout when it enters the buffer."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import torch

from src.config_fields import ConfigError, at_least, setting
from src.schedule.sources._base import Generation, Source, SourceParams, StepData, register
from src.schedule.stored import StoredRollout


@dataclass
class ReplayParams(SourceParams):
    replay_capacity: int = setting(4, "rollouts kept", at_least(1))
    replay_draws: int = setting(1, "rollouts drawn per step", at_least(0))


@register
class Replay(Source):
    name = "replay"
    help = ("on the fresh one plus `replay_draws` drawn from a buffer of the last "
            "`replay_capacity` rollouts")
    rank = 2
    Params = ReplayParams

    def __init__(self, capacity: int, draws: int):
        self.capacity, self.draws = capacity, draws
        self.buffer: deque[StoredRollout] = deque(maxlen=capacity)

    @classmethod
    def from_params(cls, params: ReplayParams) -> Replay:
        return cls(params.replay_capacity, params.replay_draws)

    @classmethod
    def check(cls, params: ReplayParams, cfg) -> None:
        if params.replay_draws > params.replay_capacity:
            raise ConfigError(f"offpolicy.replay_draws is {params.replay_draws}: that draws more "
                              f"rollouts than the buffer holds (offpolicy.replay_capacity="
                              f"{params.replay_capacity}); draw at most that many")

    def next(self, gen: Generation) -> StepData:
        generated = gen.rollout(gen.step)
        return StepData(generated, self.trained(gen.step, generated, seed=gen.seed(2)))

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
