"""One step's generation, as an off-policy source asks for it (src/schedule/sources/).

The source decides which slots are generated and when; this is how: the rollout of a slot
sampled by the current weights with that slot's seed, scored by the task and rewarded
(rewards, group advantages), the behaviour pass of a rollout that a later step trains on,
and responses continued from their prefix. It times what it does: `time_behavior` is the
behaviour passes run here, the rest of the source's time is rollout time.

It holds the current weights as the trainer scores with them (`src.policy.Scorer`), draws
its seeds from src/seeds.py and splits a rollout into mini-batches with the trainer's own
split (src/schedule/split.py `minibatch_rows`): nothing of the trainer's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from src.algorithms import group_advantages
from src.checkpoint import TrainState
from src.policy import Scorer
from src.records import step_readings
from src.rollout import Rollout
from src.schedule import StoredRollout, minibatch_rows, rollout_prompts
from src.seeds import step_seed
from src.tasks.rewards import assign_rewards


@dataclass
class Generation:
    cfg: object  # the run's config: a source reads its sections (gen.cfg.rollout, ...)
    task: object
    tokenizer: object
    backend: object
    scorer: Scorer  # the current weights, as the trainer scores with them
    format_prompt: Callable[[str], str]
    state: TrainState
    time_behavior: float = 0.0

    @property
    def step(self) -> int:
        return self.state.step

    @property
    def version(self) -> int:
        """Optimizer steps applied to the current weights."""
        return self.state.policy_version

    def seed(self, offset: int) -> int:
        return step_seed(self.cfg.seed, self.step) + offset

    def score(self, data: Rollout) -> tuple[Tensor, Tensor]:
        """logp and entropy [b, T] of `data` by the current weights."""
        return self.scorer(data)

    def sample(self, slot: int, max_new_tokens: int) -> tuple[list, Rollout]:
        """The next problems (as many as a rollout holds), sampled by the current weights
        with the seed of `slot`."""
        cfg = self.cfg
        n_prompts = rollout_prompts(cfg.train)
        problems = [self.task.problem(self.state.task_position + i) for i in range(n_prompts)]
        self.state.task_position += n_prompts
        self.backend.sync_weights(self.scorer.model)
        roll = self.backend.generate([self.format_prompt(p.prompt) for p in problems],
                                     num_samples=cfg.train.group_size, max_new_tokens=max_new_tokens,
                                     temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
                                     seed=step_seed(cfg.seed, slot))
        return problems, roll

    def continue_responses(self, contexts: list[Tensor], caps: list[int], seed: int) -> list:
        """Each context (prompt + response so far) continued by at most its cap of tokens."""
        return self.backend.continue_responses(contexts, caps, temperature=self.cfg.rollout.temperature,
                                               top_p=self.cfg.rollout.top_p, seed=seed)

    def reward(self, slot: int, data: Rollout, scores: Tensor, version: int, *,
               logp_behavior: Tensor | None = None, **stored) -> StoredRollout:
        """A scored rollout with its rewards (drawn by `slot` under task.reward=random) and
        group advantages, ready to be stored. With its behaviour log-probs (and entropies),
        also the step readings of the policy that generated it."""
        cfg = self.cfg
        rewards = assign_rewards(cfg.task.reward, scores, seed=cfg.seed, step=slot, p=cfg.task.reward_p)
        adv = group_advantages(rewards, cfg.train.group_size, scale_by_std=cfg.train.advantage_std_norm)
        out = StoredRollout(slot, version, self.step, data, rewards, scores, adv.advantages,
                            adv.degenerate_groups, adv.num_groups, logp_behavior=logp_behavior, **stored)
        if logp_behavior is not None:
            mask = data.response_mask
            out.readings = step_readings([out.entropy_behavior[mask]],
                                         [(data.sampler_logp - logp_behavior)[mask].abs()])
        return out

    def rollout(self, slot: int) -> StoredRollout:
        """Sample, score and reward the rollout of `slot` with the current weights. Under
        rollout.behaviour=sampler it is stored with the sampler's log-probs and entropies as
        its behaviour pass, which then never runs."""
        problems, roll = self.sample(slot, self.cfg.rollout.max_new_tokens)
        scores = torch.tensor([self.task.score(problems[g], text)
                               for g, text in zip(roll.group_ids.tolist(), roll.texts, strict=True)])
        out = self.reward(slot, roll, scores, self.version)
        if self.cfg.rollout.behaviour != "sampler":
            return out
        out.logp_behavior, out.entropy_behavior = roll.sampler_logp, roll.sampler_entropy
        # No pass, so no gap between sampler and trainer is measured: None, not 0.
        out.readings = step_readings([roll.sampler_entropy[roll.response_mask]], [])
        return out

    def behaviour_now(self, stored: StoredRollout) -> None:
        """The behaviour pass of a rollout trained at a later step, by the weights that just
        generated it, on the exact mini-batch tensors it will be trained on (its split is
        that of the step it is trained at, `stored.slot`). Nothing to do where the rollout
        came with its behaviour numbers (rollout.behaviour=sampler)."""
        if stored.logp_behavior is not None:
            return
        t0 = time.perf_counter()
        parts = minibatch_rows(self.cfg.train, stored.data, step_seed(self.cfg.seed, stored.slot))
        entropies, gaps = [], []
        with torch.no_grad():
            for rows in parts:
                data = stored.data.select(rows)
                logp, entropy = self.score(data)
                stored.store_behaviour(rows, logp, entropy)
                entropies.append(entropy.cpu()[data.response_mask])
                gaps.append((data.sampler_logp - logp.cpu())[data.response_mask].abs())
        stored.readings = step_readings(entropies, gaps)
        self.time_behavior += time.perf_counter() - t0
