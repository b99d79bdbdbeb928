"""A rollout as the schedule keeps it: its tensors, rewards and advantages, the policy
version that generated it, and its behaviour log-probs (by those same weights, computed at
generation time on the mini-batch tensors it is trained on)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from src.rollout import Rollout


@dataclass
class StoredRollout:
    slot: int  # the step whose problems and sampling seed it holds
    version: int  # optimizer steps applied to the weights that generated it
    generated_at: int  # the step at whose start it was generated (0: also before step 0)
    data: Rollout
    rewards: Tensor  # [B]
    scores: Tensor  # [B] the verifier's, whatever the reward
    advantages: Tensor  # [B]
    degenerate_groups: int
    num_groups: int
    # [B, T] by the generating weights; None until the behaviour pass has run
    logp_behavior: Tensor | None = None
    entropy_behavior: Tensor | None = None
    # step-level readings of the generating policy on its own samples, set with the pass
    readings: dict = field(default_factory=dict)
    # partial rollouts: [B, T] the version that generated each token (None: `version`) and
    # the tokens kept in the loss (None: all)
    token_version: Tensor | None = None
    loss_keep: Tensor | None = None

    def versions(self) -> Tensor:
        """[B, T] the policy version of every token."""
        if self.token_version is not None:
            return self.token_version
        return torch.full(self.data.response_ids.shape, self.version, dtype=torch.long)

    def kept(self) -> Tensor:
        if self.loss_keep is not None:
            return self.loss_keep
        return torch.ones(self.data.response_ids.shape, dtype=torch.bool)

    @property
    def size(self) -> int:
        return self.data.size

    def store_behaviour(self, rows: Tensor, logp: Tensor, entropy: Tensor) -> None:
        """Keep a mini-batch's behaviour pass ([b, t] for rows `rows`) in the rollout's layout."""
        if self.logp_behavior is None:
            shape = self.data.response_ids.shape
            self.logp_behavior = torch.zeros(shape, dtype=logp.dtype)
            self.entropy_behavior = torch.zeros(shape, dtype=entropy.dtype)
        # a mini-batch mixing rollouts may be wider than this one: the rest is padding here
        t = min(logp.shape[1], self.logp_behavior.shape[1])
        self.logp_behavior[rows, :t] = logp.detach().cpu()[:, :t]
        self.entropy_behavior[rows, :t] = entropy.detach().cpu()[:, :t]

    def store_readings(self, readings: dict) -> None:
        """Keep the step-level readings of the generating policy on its own samples, once
        (the trainer's, when this rollout's behaviour pass ran in its mini-batches)."""
        if self.readings:
            raise ValueError("this rollout's readings are stored already")
        self.readings = readings


def _pad_left(x: Tensor, width: int, value=0) -> Tensor:
    return torch.nn.functional.pad(x, (width - x.shape[1], 0), value=value)


def _pad_right(x: Tensor, width: int, value=0) -> Tensor:
    return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)


def concat_rollouts(parts: list[Rollout], pad_id: int = 0) -> Rollout:
    """One rollout holding `parts`' rows in order (prompts left-padded, responses
    right-padded to the widest); group ids are offset so groups stay distinct."""
    if len(parts) == 1:
        return parts[0]
    p = max(r.prompt_ids.shape[1] for r in parts)
    t = max(r.response_ids.shape[1] for r in parts)
    offsets, start = [], 0
    for r in parts:
        offsets.append(start)
        start += int(r.group_ids.max()) + 1 if r.size else 0
    return Rollout(
        prompt_ids=torch.cat([_pad_left(r.prompt_ids, p, pad_id) for r in parts]),
        prompt_mask=torch.cat([_pad_left(r.prompt_mask, p, False) for r in parts]),
        response_ids=torch.cat([_pad_right(r.response_ids, t, pad_id) for r in parts]),
        response_mask=torch.cat([_pad_right(r.response_mask, t, False) for r in parts]),
        sampler_logp=torch.cat([_pad_right(r.sampler_logp, t, 0.0) for r in parts]),
        texts=[text for r in parts for text in r.texts],
        group_ids=torch.cat([r.group_ids + off for r, off in zip(parts, offsets, strict=True)]),
        sampler_entropy=None if any(r.sampler_entropy is None for r in parts)
        else torch.cat([_pad_right(r.sampler_entropy, t, 0.0) for r in parts]),
    )


def _or_zeros(x: Tensor | None, r: StoredRollout) -> Tensor:
    return torch.zeros(r.data.response_ids.shape) if x is None else x


@dataclass
class TrainingSet:
    """The rollouts one step trains on, as one set of rows (in order of `rollouts`)."""

    rollouts: list[StoredRollout]

    def __post_init__(self) -> None:
        self.data = concat_rollouts([r.data for r in self.rollouts])
        t = self.data.response_ids.shape[1]
        self.owner = torch.cat([torch.full((r.size,), i) for i, r in enumerate(self.rollouts)])
        self.local = torch.cat([torch.arange(r.size) for r in self.rollouts])
        self.advantages = torch.cat([r.advantages for r in self.rollouts])
        self.rewards = torch.cat([r.rewards for r in self.rollouts])
        self.version = torch.cat([_pad_right(r.versions(), t) for r in self.rollouts])
        self.loss_keep = torch.cat([_pad_right(r.kept(), t, True) for r in self.rollouts])
        self.pending = torch.tensor([r.logp_behavior is None for r in self.rollouts])[self.owner]
        self.logp_behavior = torch.cat([_pad_right(_or_zeros(r.logp_behavior, r), t)
                                        for r in self.rollouts])
        self.entropy_behavior = torch.cat([_pad_right(_or_zeros(r.entropy_behavior, r), t)
                                           for r in self.rollouts])

    @property
    def size(self) -> int:
        return self.data.size

    def store_behaviour(self, rows: Tensor, logp: Tensor, entropy: Tensor) -> None:
        """Hand a mini-batch's pass over pending rows (generated by the current weights)
        back to the rollouts that own them, so they are stored with it."""
        keep = self.pending[rows]
        for i, r in enumerate(self.rollouts):
            mine = keep & (self.owner[rows] == i)
            if bool(mine.any()):
                r.store_behaviour(self.local[rows][mine], logp[mine], entropy[mine])
