"""Token entropy of the full next-token distribution, and the top-q entropy mask."""

from __future__ import annotations

import math
from fractions import Fraction

import torch
from torch import Tensor

from src.algorithms._checks import as_bool_mask, check_share


def token_entropy(logits: Tensor) -> Tensor:
    """Entropy per position from logits [..., V], stable for large or -inf logits.

    Uses logsumexp so that no probability is formed before the log; positions whose
    logits are -inf (masked vocabulary) contribute 0, not NaN.
    """
    logits = logits.float()
    # Shift by the row max first: in float32, 1e4 - logsumexp(1e4, 1e4) loses ~1e-3 to
    # rounding (H off by ~1e-4); the shifted logits are exact near the top entries.
    top = logits.amax(dim=-1, keepdim=True)
    logits = logits - torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    log_z = torch.logsumexp(logits, dim=-1, keepdim=True)
    log_p = logits - log_z
    p = log_p.exp()
    return -(p * torch.where(p > 0, log_p, torch.zeros_like(log_p))).sum(dim=-1)


def top_q_mask(entropy: Tensor, mask: Tensor, q: float) -> Tensor:
    """Keep exactly ceil(q * N) of the N masked-in tokens with the highest entropy.

    Ties are broken by position in row-major order (earlier wins), so the mask does not
    depend on the sort algorithm's stability.
    """
    if not isinstance(q, (int, float)):
        raise ValueError(f"q must be in (0, 1], got {q!r}")
    check_share("q", q)
    mask = as_bool_mask(mask, entropy)
    flat_h = entropy.detach().reshape(-1).double()
    flat_m = mask.reshape(-1)
    n = int(flat_m.sum())
    # Decimal reading of q, so q=0.2 with N=10 keeps 2 tokens, not ceil(2.0000000000000004).
    k = math.ceil(Fraction(repr(float(q))) * n)
    candidates = flat_m.nonzero().squeeze(1)
    # Sort by (-entropy, index): stable sort on -entropy over index-ordered candidates.
    order = torch.sort(-flat_h[candidates], stable=True).indices
    keep = torch.zeros_like(flat_m)
    keep[candidates[order[:k]]] = True
    return keep.view_as(mask)
