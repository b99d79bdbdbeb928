"""src/minibatches.py `decided_per_rollout`: one decision over the step's whole rollout, its
mini-batches stacked in order and right-padded to the longest, each handed back its rows."""

from __future__ import annotations

import torch

from src.algorithms import build_method
from src.minibatches import MiniBatch, decided_per_rollout
from src.rollout import Rollout


def _minibatch(entropy: list[list[float]], mask: list[list[bool]]) -> MiniBatch:
    """A mini-batch whose behaviour entropies and response mask are given; the log-probs and
    advantages are the same everywhere, so the selection can only follow the entropies."""
    ent = torch.tensor(entropy)
    b, t = ent.shape
    data = Rollout(prompt_ids=torch.ones(b, 1, dtype=torch.long),
                   prompt_mask=torch.ones(b, 1, dtype=torch.bool),
                   response_ids=torch.ones(b, t, dtype=torch.long),
                   response_mask=torch.tensor(mask), sampler_logp=torch.zeros(b, t),
                   texts=[""] * b, group_ids=torch.zeros(b, dtype=torch.long))
    return MiniBatch(torch.arange(b), data, torch.full((b, t), -1.0), ent, torch.ones(b),
                     torch.zeros(b))


def test_top_entropy_at_rollout_scope_keeps_the_top_q_of_the_whole_rollout():
    # Two mini-batches of different widths (2 and 3 tokens); 8 response tokens in all.
    first = _minibatch([[0.1, 0.9], [0.5, 0.2]], [[True, True], [True, True]])
    second = _minibatch([[0.8, 0.3, 0.7], [0.6, 0.95, 0.99]], [[True, True, True], [True, False, False]])
    method = build_method("top_entropy", {"q": 0.5, "scope": "rollout"})
    first, second = decided_per_rollout(method, [first, second], seed=0)
    # q = 0.5 of 8 masked-in tokens keeps 4: entropies 0.9, 0.8, 0.7, 0.6 (0.95 and 0.99 are
    # outside the response mask; the padding of the first mini-batch too). The first
    # mini-batch keeps one token, though a top half of its own would keep two (0.9, 0.5).
    assert first.decision.tokens.tolist() == [[False, True], [False, False]]
    assert second.decision.tokens.tolist() == [[True, False, True], [True, False, False]]
