"""Input validation shared by the pure objective functions.

Errors name the offending argument and say how to fix it, because these functions are
called from three trainers (ours, TRL, verl) whose tensors arrive in different layouts.
"""

from __future__ import annotations

import torch
from torch import Tensor


class NonFiniteError(ValueError):
    """NaN or inf where the objective needs finite numbers; trainers skip the update."""


def as_bool_mask(mask: Tensor, like: Tensor, name: str = "mask") -> Tensor:
    if mask.shape != like.shape:
        raise ValueError(
            f"{name} has shape {tuple(mask.shape)} but the log-probs/ratios have shape "
            f"{tuple(like.shape)}; pass one mask entry per response token"
        )
    mask = mask.bool()
    if not bool(mask.any()):
        raise ValueError(
            f"{name} selects no tokens; an update needs at least one response token "
            "(drop empty mini-batches before calling the objective)"
        )
    return mask


def check_finite(name: str, values: Tensor, mask: Tensor) -> None:
    bad = ~torch.isfinite(values.detach()) & mask
    if bool(bad.any()):
        where = bad.nonzero()[0].tolist()
        raise NonFiniteError(
            f"{name} has {int(bad.sum())} non-finite value(s) on masked-in tokens "
            f"(first at index {where}); skip this update or fix the forward pass"
        )


def broadcast_advantages(advantages: Tensor, like: Tensor) -> Tensor:
    """Accept per-sequence [B] or per-token [B, T] advantages."""
    if advantages.shape == like.shape:
        return advantages
    if like.dim() == 2 and advantages.shape == like.shape[:1]:
        return advantages[:, None].expand_as(like)
    raise ValueError(
        f"advantages has shape {tuple(advantages.shape)}; expected {tuple(like.shape)} "
        f"(per token) or {tuple(like.shape[:1])} (per sequence)"
    )


def check_bounds(c_low: float, c_high: float, name: str = "c_low") -> None:
    if not (0.0 <= c_low < c_high):
        raise ValueError(
            f"{name}: need 0 <= c_low < c_high, got c_low={c_low}, c_high={c_high}"
        )


def check_share(name: str, value: float, *, closed: bool = True) -> None:
    """0 < value <= 1 (closed) or 0 < value < 1; NaN fails both."""
    ok = 0.0 < value <= 1.0 if closed else 0.0 < value < 1.0
    if not ok:
        raise ValueError(f"{name} must be in (0, 1{']' if closed else ')'}, got {value}")
