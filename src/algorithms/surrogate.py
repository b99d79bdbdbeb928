"""The clipped PPO surrogate: per-token clip states, the surrogate, and loss aggregation."""

from __future__ import annotations

import torch
from torch import Tensor

CLIP_STATES = ("none", "clip_low", "clip_high", "dual")
NONE, CLIP_LOW, CLIP_HIGH, DUAL = range(4)
AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def clip_states(ratio: Tensor, advantages: Tensor, c_low: float, c_high: float,
                dual_clip_c: float | None = None) -> Tensor:
    """int8 state per token. A token gets no gradient iff its state is not `none`.

    `clip_high`: A>0 and r>c_high; `clip_low`: A<0 and r<c_low; `dual`: A<0 and
    r>dual_clip_c (dual-clip on). A>0, r<c_low and A<0, r>c_high keep their gradient.
    """
    r = ratio.detach()
    state = torch.zeros(r.shape, dtype=torch.int8, device=r.device)
    state[(advantages > 0) & (r > c_high)] = CLIP_HIGH
    state[(advantages < 0) & (r < c_low)] = CLIP_LOW
    if dual_clip_c is not None:
        state[(advantages < 0) & (r > dual_clip_c)] = DUAL
    return state


def surrogate(ratio: Tensor, advantages: Tensor, c_low: float, c_high: float,
              dual_clip_c: float | None = None) -> Tensor:
    """J_t = min(r A, clip(r, c_low, c_high) A), and max(J_t, c A) for A<0 under dual-clip."""
    j = torch.minimum(ratio * advantages, ratio.clamp(c_low, c_high) * advantages)
    if dual_clip_c is not None:
        j = torch.where(advantages < 0, torch.maximum(j, dual_clip_c * advantages), j)
    return j


def loss_denominator(loss_mask: Tensor, mode: str = "token-mean",
                     norm_length: int | None = None) -> float:
    """The outer normaliser `aggregate` divides by for this [B, T] loss mask.

    token-mean: the number of loss-bearing tokens; seq-mean-token-mean: the number of
    responses with at least one loss-bearing token; seq-mean-token-sum-norm: B * norm_length
    (default T). Take it once over a whole mini-batch and pass it to `aggregate` (or the
    objectives' `loss_denominator=`) for each slice of it: the slices' losses then sum to the
    whole mini-batch's loss, which is how gradient accumulation over micro-batches stays exact.
    """
    m = loss_mask.bool()
    if mode == "token-mean":
        return float(max(int(m.sum()), 1))
    if m.dim() != 2:
        raise ValueError(f"aggregation {mode!r} needs [B, T] tensors, got {tuple(m.shape)}")
    if mode == "seq-mean-token-mean":
        return float(max(int((m.sum(dim=1) > 0).sum()), 1))
    if mode == "seq-mean-token-sum-norm":
        length = m.shape[1] if norm_length is None else norm_length
        return float(m.shape[0] * length)
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {mode!r}")


def aggregate(token_loss: Tensor, loss_mask: Tensor, mode: str = "token-mean",
              norm_length: int | None = None, *, denominator: float | Tensor | None = None) -> Tensor:
    """Reduce per-token loss [B, T] to a scalar over the loss-bearing tokens.

    token-mean: mean over all loss-bearing tokens of the mini-batch.
    seq-mean-token-mean: per-response token mean, then mean over responses that bear loss.
    seq-mean-token-sum-norm (Dr. GRPO): per-response token sum / norm_length (default T),
    then mean over all responses, so no length normalisation biases long responses.

    `denominator` replaces the outer normaliser (the token count, the bearing-response count
    or B * norm_length) with a given one, e.g. `loss_denominator` of the whole mini-batch when
    `token_loss` is one micro-batch of it; None (default) takes it from this batch.
    """
    m = loss_mask.to(token_loss.dtype)
    masked = token_loss * m
    if mode == "token-mean":
        den = m.sum().clamp(min=1.0) if denominator is None else denominator
        return masked.sum() / den
    if token_loss.dim() != 2:
        raise ValueError(f"aggregation {mode!r} needs [B, T] tensors, got {tuple(token_loss.shape)}")
    if mode == "seq-mean-token-mean":
        per_seq_tokens = m.sum(dim=1)
        bearing = per_seq_tokens > 0
        per_seq = masked.sum(dim=1)[bearing] / per_seq_tokens[bearing]
        den = bearing.sum().clamp(min=1) if denominator is None else denominator
        return per_seq.sum() / den
    if mode == "seq-mean-token-sum-norm":
        length = token_loss.shape[1] if norm_length is None else norm_length
        den = token_loss.shape[0] * length if denominator is None else denominator
        return masked.sum() / den
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {mode!r}")
