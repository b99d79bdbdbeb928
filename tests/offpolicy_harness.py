"""A trainer on the tiny random policy with a fake, seeded rollout engine and task, for the
off-policy tests: every step's data, log-probs and records are in memory."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from src.build import build_optimizer
from src.checkpoint import TrainState
from src.rollout import Rollout
from src.trainer import Trainer
from tests.conftest import compose
from tests.tiny_policy import VOCAB, P, T, tiny_model

SMALL = ["train.prompts_per_step=2", "train.group_size=4", f"rollout.max_new_tokens={T}",
         "train.lr=0.05", "train.staleness=2"]


@dataclass(frozen=True)
class Problem:
    prompt: str


class FakeTask:
    def problem(self, index: int) -> Problem:
        return Problem(str(index))

    def score(self, problem: Problem, text: str) -> float:
        return float(int(text) % 2)  # about half the responses are "correct"


class FakeBackend:
    """Ragged random prompts and responses, a function of (prompts, seed) only."""

    def generate(self, prompts, *, num_samples, max_new_tokens, temperature, top_p, seed) -> Rollout:
        gen = torch.Generator().manual_seed(seed)
        b = len(prompts) * num_samples
        prompt_len = torch.randint(1, P + 1, (b,), generator=gen)
        response_len = torch.randint(1, T + 1, (b,), generator=gen)
        prompt_mask = torch.arange(P)[None, :] >= P - prompt_len[:, None]
        response_mask = torch.arange(T)[None, :] < response_len[:, None]
        ids = torch.randint(1, VOCAB, (b, P + T), generator=gen)
        texts = [str(int(x)) for x in torch.randint(0, 1000, (b,), generator=gen)]
        return Rollout(prompt_ids=ids[:, :P] * prompt_mask, prompt_mask=prompt_mask,
                       response_ids=ids[:, P:] * response_mask, response_mask=response_mask,
                       sampler_logp=torch.zeros(b, T), texts=texts,
                       group_ids=torch.arange(len(prompts)).repeat_interleave(num_samples))

    def sync_weights(self, model) -> None:
        pass

    def close(self) -> None:
        pass


class MemoryWriter:
    def __init__(self):
        self.updates, self.steps, self.tokens = [], [], {}

    def log_update(self, record):
        self.updates.append(record)

    def log_step(self, record):
        self.steps.append(record)

    def write_tokens(self, step, columns):
        self.tokens[step] = columns


def make_trainer(overrides: list[str], tmp_path):
    cfg = compose([*SMALL, *overrides])
    model = tiny_model()
    optimizer, scheduler = build_optimizer(cfg, model)
    writer = MemoryWriter()
    trainer = Trainer(cfg, model, None, FakeTask(), FakeBackend(), optimizer, scheduler, writer,
                      tmp_path / "checkpoints")
    return trainer, writer


def run_steps(trainer: Trainer, steps: int, state: TrainState | None = None):
    """Run `steps` steps; returns the state and the weights at the start of each step."""
    state = state or TrainState()
    starts = []
    for _ in range(steps):
        starts.append(copy.deepcopy(trainer.model.state_dict()))
        trainer.train_step(state)
        state.step += 1
    return state, starts
