"""Clip states, the clipped PPO surrogate, and loss aggregation.

A token's clip state says what its method did to the token's gradient. The states, and
whether each carries a gradient, are defined in src/run_vocab.py; token files store them by
name.

| state            | gradient             | set by                                                            |
|------------------|----------------------|-------------------------------------------------------------------|
| `none`           | the method's own     | every method                                                      |
| `clip_low`       | none                 | A<0 and the ratio (token or response) below c_low                 |
| `clip_high`      | none                 | A>0 and the ratio (token or response) above c_high                |
| `dual`           | none                 | dual-clip: A<0 and r > dual_clip_c                                |
| `masked`         | none                 | the method masked or detached the token (clip_cov, dppo)          |
| `trunc_low`      | kept, weight raised  | cispo: r < c_low, the IS weight is raised to c_low                |
| `trunc_high`     | kept, weight cut     | cispo: r > c_high, the IS weight is cut to c_high (dppo: its cap) |
| `kl_penalty`     | kept, plus a penalty | kl_cov: the token also pays coef * |log r|                        |
| `gated`          | kept, damped         | sapo: its soft gate keeps less than half of r A's gradient        |
| `preserved_low`  | kept, value clipped  | gppo: A<0 and r < c_low; gradient beta1 c_low A                   |
| `preserved_high` | kept, value clipped  | gppo: A>0 and r > c_high; gradient beta2 c_high A                 |
| `dual_capped`    | kept, weight capped  | aspo's dual clip: A<0 and r > c, or A>0 and 1/r > c               |

dcpo's per-token bounds give `clip_low`, `clip_high` and `dual`, as ppo's do.

So clip fractions count the same thing in every method: the share of tokens whose
gradient the method removed (`NO_GRADIENT`); the other states have fractions of their own.
"""

from __future__ import annotations

import torch
from torch import Tensor

from src.run_vocab import CLIP_STATE_NAMES as CLIP_STATES
from src.run_vocab import NO_GRADIENT_STATES

# The states' int8 codes, by name (a state's code is its place in src/run_vocab.py).
NONE, CLIP_LOW, CLIP_HIGH, DUAL, MASKED, TRUNC_LOW, TRUNC_HIGH, KL_PENALTY = (
    CLIP_STATES.index(name) for name in ("none", "clip_low", "clip_high", "dual", "masked",
                                         "trunc_low", "trunc_high", "kl_penalty"))
GATED, PRESERVED_LOW, PRESERVED_HIGH, DUAL_CAPPED = (
    CLIP_STATES.index(name) for name in ("gated", "preserved_low", "preserved_high",
                                         "dual_capped"))
NO_GRADIENT = tuple(CLIP_STATES.index(name) for name in NO_GRADIENT_STATES)
AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def clipped_high(ratio: Tensor, advantages: Tensor, c_high: float) -> Tensor:
    """The clip boundary for A>0, defined once: clipped iff r > c_high (r == c_high keeps
    its gradient). `clip_states` and BAPO's searches (src/algorithms/bapo.py) both use it."""
    return (advantages > 0) & (ratio > c_high)


def clipped_low(ratio: Tensor, advantages: Tensor, c_low: float) -> Tensor:
    """The clip boundary for A<0, defined once: clipped iff r < c_low (r == c_low keeps its
    gradient)."""
    return (advantages < 0) & (ratio < c_low)


def carries_gradient(state: Tensor) -> Tensor:
    """True where a token's state leaves it a gradient (every state but `NO_GRADIENT`),
    read from the list itself, not from the states' order, so a state appended later
    counts as what NO_GRADIENT says it is."""
    no_gradient = torch.tensor(NO_GRADIENT, dtype=state.dtype, device=state.device)
    return ~torch.isin(state, no_gradient)


def clip_states(ratio: Tensor, advantages: Tensor, c_low: float, c_high: float,
                dual_clip_c: float | None = None) -> Tensor:
    """int8 state per token of the clipped surrogate; see the table above.

    `clip_high`: A>0 and r>c_high; `clip_low`: A<0 and r<c_low; `dual`: A<0 and
    r>dual_clip_c (dual-clip on). A>0, r<c_low and A<0, r>c_high keep their gradient.
    """
    r = ratio.detach()
    state = torch.zeros(r.shape, dtype=torch.int8, device=r.device)
    state[clipped_high(r, advantages, c_high)] = CLIP_HIGH
    state[clipped_low(r, advantages, c_low)] = CLIP_LOW
    if dual_clip_c is not None:
        state[(advantages < 0) & (r > dual_clip_c)] = DUAL
    return state


def clipped_surrogate(ratio: Tensor, advantages: Tensor, state: Tensor, c_low: float,
                      c_high: float, dual_clip_c: float | None = None) -> Tensor:
    """J_t for given clip states: r A where the state is `none`, a constant elsewhere.

    The constant is the value `min(r A, clip(r) A)` (and the dual-clip `max(., c A)`) takes
    there: c_high A, c_low A or dual_clip_c A. Selecting by state rather than with
    `torch.minimum` makes the gradient follow the state exactly: at a rounding tie
    r A == c_high A, `minimum` would split the gradient and give a clipped token half of it.
    """
    clipped = ratio.detach().clamp(c_low, c_high) * advantages
    if dual_clip_c is not None:
        clipped = torch.where(state == DUAL, dual_clip_c * advantages, clipped)
    return torch.where(state == NONE, ratio * advantages, clipped)


def surrogate(ratio: Tensor, advantages: Tensor, c_low: float, c_high: float,
              dual_clip_c: float | None = None) -> Tensor:
    """J_t = min(r A, clip(r, c_low, c_high) A), and max(J_t, c A) for A<0 under dual-clip.

    The gradient is r A on tokens in state `none` and exactly 0 on clipped ones.
    """
    state = clip_states(ratio, advantages, c_low, c_high, dual_clip_c)
    return clipped_surrogate(ratio, advantages, state, c_low, c_high, dual_clip_c)


def loss_denominator(loss_mask: Tensor, mode: str = "token-mean",
                     norm_length: int | None = None) -> float:
    """The outer normaliser `aggregate` divides by for this [B, T] loss mask.

    token-mean: the number of loss-bearing tokens; seq-mean-token-mean: the number of
    responses with at least one loss-bearing token; seq-mean-token-sum-norm: B * norm_length
    (default T). Take it once over a whole mini-batch and pass it to `aggregate` (or the
    methods' `denominator=`) for each slice of it: the slices' losses then sum to the
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


def check_aggregation(aggregation: str) -> None:
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
