"""Where a response's reward comes from: the task's verifier, or a coin (a control).

`random` rewards are Bernoulli(p) per response, drawn from (seed, step, response index)
alone, independent of the text: advantages are then zero-mean noise, so whatever happens
to entropy comes from the clipping rule and staleness, not from learning. The verifier
still runs; its score is logged as `accuracy`, so a run shows that nothing is learned.
"""

from __future__ import annotations

import torch
from torch import Tensor

REWARD_SOURCES = ("verifier", "random")


def random_rewards(seed: int, step: int, n: int, p: float) -> Tensor:
    """Bernoulli(p) for responses 0..n-1 of `step`; its own generator, so the rollout's
    sampling and every other random stream are unchanged."""
    gen = torch.Generator().manual_seed((seed * 1_000_033 + step * 104_729 + 17) % (2**63 - 1))
    return (torch.rand(n, generator=gen, dtype=torch.float64) < p).to(torch.float32)


def assign_rewards(source: str, scores: Tensor, *, seed: int, step: int, p: float) -> Tensor:
    if source == "verifier":
        return scores
    if source == "random":
        return random_rewards(seed, step, scores.shape[0], p)
    raise ValueError(f"task.reward must be one of {REWARD_SOURCES}, got {source!r}")
