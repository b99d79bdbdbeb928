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


EOS, PAD = 2, 0


class FakeTokenizer:
    eos_token_id, pad_token_id = EOS, PAD

    def batch_decode(self, sequences, skip_special_tokens=True):
        return [str(sum(int(x) for x in seq)) for seq in sequences]


class FakeBackend:
    """Ragged random prompts and responses, a function of (prompts, seed) only; a response
    that ends before `max_new_tokens` ends with EOS."""

    def generate(self, prompts, *, num_samples, max_new_tokens, temperature, top_p, seed) -> Rollout:
        gen = torch.Generator().manual_seed(seed)
        b = len(prompts) * num_samples
        prompt_len = torch.randint(1, P + 1, (b,), generator=gen)
        response_len = torch.randint(1, T + 1, (b,), generator=gen).clamp(max=max_new_tokens)
        prompt_mask = torch.arange(P)[None, :] >= P - prompt_len[:, None]
        response_mask = torch.arange(T)[None, :] < response_len[:, None]
        ids = torch.randint(3, VOCAB, (b, P + T), generator=gen)
        ends = torch.randint(1, T + 1, (b,), generator=gen) <= response_len  # some end early
        ids[torch.arange(b), P + response_len - 1] = torch.where(ends, EOS, ids[torch.arange(b), P + response_len - 1])
        texts = [str(int(x)) for x in torch.randint(0, 1000, (b,), generator=gen)]
        width = int(response_len.max())
        return Rollout(prompt_ids=ids[:, :P] * prompt_mask, prompt_mask=prompt_mask,
                       response_ids=(ids[:, P:] * response_mask)[:, :width],
                       response_mask=response_mask[:, :width],
                       sampler_logp=torch.zeros(b, width), texts=texts,
                       group_ids=torch.arange(len(prompts)).repeat_interleave(num_samples))

    def continue_responses(self, contexts, caps, *, temperature, top_p, seed, greedy=False):
        gen = torch.Generator().manual_seed(seed)
        out = []
        for cap in caps:
            n = int(torch.randint(1, cap + 1, (1,), generator=gen))
            tokens = torch.randint(3, VOCAB, (n,), generator=gen).tolist()
            if n < cap or bool(torch.rand(1, generator=gen) < 0.3):
                tokens[-1] = EOS
            out.append((tokens, [0.0] * n))
        return out

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
    optimizer, scheduler = build_optimizer(cfg.train, model)
    writer = MemoryWriter()
    trainer = Trainer(cfg, model, FakeTokenizer(), FakeTask(), FakeBackend(), optimizer, scheduler,
                      writer, tmp_path / "checkpoints")
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
