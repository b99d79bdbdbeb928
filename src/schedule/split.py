"""How k = train.staleness updates are made from one rollout (`train.staleness_mode`).

- minibatch: one rollout of P*G responses, shuffled and split into k mini-batches;
- fixed_update: a rollout of k*P*G responses split into k mini-batches of P*G, so every
  update sees as many responses as a 1x update and only the data's age changes;
- epochs: k full-batch updates on one rollout of P*G (Algorithm 1's inner loop).

`train.epochs = e` repeats the pass over the mini-batches (minibatch and fixed_update).
Plain functions of the train config, free of torch-side state: config validation, the
optimizer's warmup and the trainer all read them. The counts (mini-batches, passes, updates
per rollout) are in src/updates.py, which analysis/ imports without torch.
"""

from __future__ import annotations

import torch
from torch import Tensor

from src.rollout import Rollout
from src.updates import (  # noqa: F401 - the counts, in plain Python (the config reads them)
    SPLITS,
    STALENESS_MODES,
    minibatch_count,
    minibatch_size,
    rollout_prompts,
)


def split_rows(size: int, parts: int, seed: int, groups: Tensor | None = None) -> list[Tensor]:
    """A seeded shuffle of `size` rows cut into `parts` mini-batches, each sorted.

    The same (size, parts, seed) always gives the same rows: a rollout's split can be made
    when it is generated (its behaviour pass runs on the exact mini-batch tensors) and again
    when it is trained on, steps later. `groups` (each row's group id): the shuffle and the
    cut are of whole groups (`train.minibatch_split=groups`).
    """
    gen = torch.Generator().manual_seed(seed)
    if groups is not None:
        ids = torch.unique(groups)
        chosen = ids[torch.randperm(ids.numel(), generator=gen)]
        return [torch.isin(groups, part).nonzero()[:, 0]
                for part in torch.tensor_split(chosen, min(parts, ids.numel())) if part.numel()]
    perm = torch.randperm(size, generator=gen)
    # Equal parts when `parts` divides `size` (every source but partial rollouts, whose
    # number of ended groups varies); otherwise sizes differ by at most one.
    return [rows.sort().values for rows in torch.tensor_split(perm, min(parts, size)) if rows.numel()]


def minibatch_rows(train, data: Rollout, seed: int, rollouts: int = 1) -> list[Tensor]:
    """The rows of each mini-batch of `data` (`rollouts` rollouts one after another) at the step
    whose seed is `seed` (src/seeds.py): `train.staleness_mode`'s count of mini-batches per
    rollout, drawn as `train.minibatch_split` says.

    The one split: the generation runs a rollout's behaviour pass ahead of the step that
    trains on it with this split of that step's seed, and the trainer splits the step's
    training set with it, so both score the same mini-batch tensors.
    """
    groups = data.group_ids if train.minibatch_split == "groups" else None
    return split_rows(data.size, minibatch_count(train) * rollouts, seed, groups)
