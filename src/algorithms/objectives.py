"""Method registry: ppo, clip_higher, top_entropy and bapo behind one signature.

Every method is `fn(logp, logp_behavior, advantages, mask, *, entropy=None, **params)
-> PolicyLossOutput`, with tensors of shape [B, T] (advantages may be [B]). `logp`
carries the graph; everything else is treated as data.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from src.algorithms import bapo as bapo_search
from src.algorithms._checks import as_bool_mask, broadcast_advantages, check_bounds, check_finite
from src.algorithms.entropy import top_q_mask
from src.algorithms.surrogate import (
    AGGREGATIONS,
    CLIP_HIGH,
    CLIP_LOW,
    DUAL,
    NONE,
    aggregate,
    clip_states,
    surrogate,
)


@dataclass
class PolicyLossOutput:
    loss: Tensor  # scalar, differentiable w.r.t. logp
    ratio: Tensor  # [B, T], detached
    clip_state: Tensor  # [B, T] int8, see surrogate.CLIP_STATES
    in_loss: Tensor  # [B, T] bool: tokens whose surrogate enters the loss
    c_low: float
    c_high: float
    metrics: dict[str, float | int | bool | None] = field(default_factory=dict)
    bounds: bapo_search.BoundsResult | None = None  # bapo: the search result behind c_low/c_high


MethodFn = Callable[..., PolicyLossOutput]
METHODS: dict[str, MethodFn] = {}
METHOD_DEFAULTS: dict[str, dict] = {}


def register_method(name: str, **defaults) -> Callable[[MethodFn], MethodFn]:
    def wrap(fn: MethodFn) -> MethodFn:
        METHODS[name] = fn
        METHOD_DEFAULTS[name] = defaults
        return fn
    return wrap


def policy_loss(method: str, logp: Tensor, logp_behavior: Tensor, advantages: Tensor,
                mask: Tensor, *, entropy: Tensor | None = None, **params) -> PolicyLossOutput:
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; registered: {sorted(METHODS)}")
    return METHODS[method](logp, logp_behavior, advantages, mask, entropy=entropy, **params)


def _inputs(logp, logp_behavior, advantages, mask):
    if logp_behavior.shape != logp.shape:
        raise ValueError(
            f"logp_behavior has shape {tuple(logp_behavior.shape)} but logp has "
            f"{tuple(logp.shape)}; both must be per response token"
        )
    mask = as_bool_mask(mask, logp)
    check_finite("logp", logp, mask)
    check_finite("logp_behavior", logp_behavior, mask)
    advantages = broadcast_advantages(advantages, logp).to(logp.dtype)
    check_finite("advantages", advantages, mask)
    # Padding may hold anything; zero it so no NaN reaches the graph through exp() or A.
    advantages = torch.where(mask, advantages, torch.zeros_like(advantages))
    log_ratio = torch.where(mask, logp - logp_behavior.detach(), torch.zeros_like(logp))
    return log_ratio.exp(), advantages, mask


def _check_params(c_low, c_high, dual_clip_c, aggregation):
    check_bounds(c_low, c_high)
    if dual_clip_c is not None and not dual_clip_c > 1.0:
        raise ValueError(f"dual_clip_c must be > 1 (or None to disable), got {dual_clip_c}")
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")


def _safe_div(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def token_metrics(ratio: Tensor, advantages: Tensor, mask: Tensor, in_loss: Tensor,
                  state: Tensor, c_low: float, c_high: float, logp: Tensor,
                  entropy: Tensor | None) -> dict[str, float | int | None]:
    """Clip fractions, token counts and both contribution readings for one update.

    Computed on the masked tokens only (flattened first), so padding costs nothing.
    """
    r = ratio.detach()[mask].double()
    a = advantages.detach()[mask].double()
    st, il = state[mask], in_loss[mask]
    lp = logp.detach()[mask].double()
    pos, neg = (a > 0) & il, (a < 0) & il
    carries = il & (st == NONE)
    clipped = il & ~carries
    kinds = torch.bincount(st[il].long(), minlength=4).tolist()
    n_in, n_pos, n_neg = int(il.sum()), int(pos.sum()), int(neg.sum())
    grad = r * a.abs()
    grad_pos, grad_neg = float(grad[pos & carries].sum()), float(grad[neg & carries].sum())
    value = surrogate(r, a, c_low, c_high).abs()
    value_pos, value_neg = float(value[pos].sum()), float(value[neg].sum())
    log_r = r.log()
    # Paper Eq. 6: entropy change ~ -Cov(log pi, A * X), X = 1 for gradient-carrying tokens.
    ax = a * carries
    cov = float(((lp - lp.mean()) * (ax - ax.mean())).mean())
    n_signed = n_pos + n_neg
    return {
        "tokens_in_loss": n_in,
        "tokens_pos": n_pos,
        "tokens_neg": n_neg,
        "tokens_zero": n_in - n_signed,
        "token_share_pos": _safe_div(n_pos, n_signed),
        "token_share_neg": _safe_div(n_neg, n_signed),
        "clip_frac": _safe_div(n_in - kinds[NONE], n_in),
        "clip_low_frac": _safe_div(kinds[CLIP_LOW], n_in),
        "clip_high_frac": _safe_div(kinds[CLIP_HIGH], n_in),
        "dual_clip_frac": _safe_div(kinds[DUAL], n_in),
        "clip_frac_pos": _safe_div(int((clipped & pos).sum()), n_pos),
        "clip_frac_neg": _safe_div(int((clipped & neg).sum()), n_neg),
        "contrib_grad_pos": grad_pos,
        "contrib_grad_neg": grad_neg,
        "contrib_grad_pos_share": _safe_div(grad_pos, grad_pos + grad_neg),
        "contrib_value_pos": value_pos,
        "contrib_value_neg": value_neg,
        "contrib_value_pos_share": _safe_div(value_pos, value_pos + value_neg),
        "ratio_mean": float(r.mean()),
        "abs_log_ratio_mean": float(log_r.abs().mean()),
        "kl_k3": float(((r - 1.0) - log_r).mean()),
        "entropy_clip_cov": cov,
        "entropy_mean": float(entropy.detach()[mask].double().mean()) if entropy is not None else None,
        "zero_advantage": n_signed == 0,
    }


def _clipped_objective(logp, ratio, adv, mask, *, c_low, c_high, dual_clip_c, aggregation,
                       norm_length, entropy, selection=None, loss_denominator=None):
    """The loss and stats from validated inputs (see `_inputs`)."""
    in_loss = mask if selection is None else mask & selection
    token_j = surrogate(ratio, adv, c_low, c_high, dual_clip_c)
    loss = -aggregate(token_j, in_loss, aggregation, norm_length, denominator=loss_denominator)
    state = clip_states(ratio, adv, c_low, c_high, dual_clip_c)
    metrics = token_metrics(ratio, adv, mask, in_loss, state, c_low, c_high, logp, entropy)
    metrics.update(c_low=c_low, c_high=c_high, rho=metrics["contrib_grad_pos_share"],
                   rho_before=metrics["contrib_grad_pos_share"], bapo_steps=0,
                   bapo_reached=None, bapo_undefined=None)
    return PolicyLossOutput(loss, ratio.detach(), state, in_loss, c_low, c_high, metrics)


@register_method("ppo", c_low=0.8, c_high=1.2)
def ppo(logp, logp_behavior, advantages, mask, *, entropy=None, c_low=0.8, c_high=1.2,
        dual_clip_c=None, aggregation="token-mean", norm_length=None,
        loss_denominator=None) -> PolicyLossOutput:
    """`loss_denominator` (every method): the aggregation's outer normaliser, given when this
    batch is one micro-batch of a larger one (see `surrogate.loss_denominator`)."""
    _check_params(c_low, c_high, dual_clip_c, aggregation)
    ratio, adv, mask = _inputs(logp, logp_behavior, advantages, mask)
    return _clipped_objective(logp, ratio, adv, mask, c_low=c_low, c_high=c_high,
                              dual_clip_c=dual_clip_c, aggregation=aggregation,
                              norm_length=norm_length, entropy=entropy,
                              loss_denominator=loss_denominator)


@register_method("clip_higher", c_low=0.8, c_high=1.28)
def clip_higher(logp, logp_behavior, advantages, mask, *, entropy=None, c_low=0.8, c_high=1.28,
                dual_clip_c=None, aggregation="token-mean", norm_length=None,
                loss_denominator=None) -> PolicyLossOutput:
    """DAPO's decoupled clip: eps_low 0.2, eps_high 0.28."""
    return ppo(logp, logp_behavior, advantages, mask, entropy=entropy, c_low=c_low, c_high=c_high,
               dual_clip_c=dual_clip_c, aggregation=aggregation, norm_length=norm_length,
               loss_denominator=loss_denominator)


@register_method("top_entropy", c_low=0.8, c_high=1.28, q=0.2)
def top_entropy(logp, logp_behavior, advantages, mask, *, entropy=None, c_low=0.8, c_high=1.28,
                q=0.2, selection_mask=None, dual_clip_c=None, aggregation="token-mean",
                norm_length=None, loss_denominator=None) -> PolicyLossOutput:
    """DAPO clip plus the loss on the top-q entropy tokens only (Wang et al. 2025).

    `selection_mask` overrides the per-mini-batch selection, e.g. a mask computed once
    per rollout batch from the behaviour policy's entropies (`scope: rollout`).
    """
    _check_params(c_low, c_high, dual_clip_c, aggregation)
    if selection_mask is None:
        if entropy is None:
            raise ValueError("top_entropy needs entropy= (per-token entropy of the current policy)")
        if entropy.shape != logp.shape:
            raise ValueError(f"entropy has shape {tuple(entropy.shape)}, expected {tuple(logp.shape)}")
        check_finite("entropy", entropy, as_bool_mask(mask, logp))
        selection_mask = top_q_mask(entropy, mask, q)
    elif selection_mask.shape != logp.shape:
        raise ValueError(f"selection_mask has shape {tuple(selection_mask.shape)}, expected {tuple(logp.shape)}")
    ratio, adv, mask = _inputs(logp, logp_behavior, advantages, mask)
    return _clipped_objective(logp, ratio, adv, mask, c_low=c_low, c_high=c_high,
                              dual_clip_c=dual_clip_c, aggregation=aggregation,
                              norm_length=norm_length, entropy=entropy,
                              selection=selection_mask.bool(), loss_denominator=loss_denominator)


@register_method("bapo", rho0=0.4, low_start=0.6, low_max=0.9, high_start=1.2, high_max=3.0,
                 high_step=0.05, low_step=0.02, contribution="gradient", weights=None,
                 order="paper")
def bapo(logp, logp_behavior, advantages, mask, *, entropy=None, rho0=0.4, low_start=0.6,
         low_max=0.9, high_start=1.2, high_max=3.0, high_step=0.05, low_step=0.02,
         contribution="gradient", weights=None, order="paper", search="fast",
         dual_clip_c=None, aggregation="token-mean", norm_length=None, bounds=None,
         loss_denominator=None) -> PolicyLossOutput:
    """Adaptive bounds searched on this mini-batch's detached ratios, then the clipped loss.

    `bounds`: a `BoundsResult` found beforehand (e.g. once on a whole mini-batch whose loss
    is accumulated over micro-batches): the search is skipped, its bounds and rho are used.
    """
    _check_params(low_start, high_start, dual_clip_c, aggregation)
    bapo_search._validate(rho0, low_start, low_max, high_start, high_max, high_step, low_step,
                          contribution, order)
    if search not in ("fast", "reference"):
        raise ValueError(f"search must be 'fast' or 'reference', got {search!r}")
    ratio, adv, mask = _inputs(logp, logp_behavior, advantages, mask)
    w = bapo_search._token_weights(weights, ratio, logp_behavior)
    if dual_clip_c is not None and contribution == "gradient":
        # Dual-clipped tokens carry no gradient whatever the bounds, so they get weight 0
        # in rho (they stay in the mask: A != 0 but all clipped means rho = 0, not undefined).
        keep = ~((adv < 0) & (ratio.detach() > dual_clip_c))
        w = keep.to(ratio.dtype) if w is None else torch.where(keep, w, 0.0)
    grid = dict(rho0=rho0, low_start=low_start, low_max=low_max, high_start=high_start,
                high_max=high_max, high_step=high_step, low_step=low_step,
                contribution=contribution, order=order)
    if bounds is not None:
        if not isinstance(bounds, bapo_search.BoundsResult):
            raise TypeError(f"bounds must be a BoundsResult or None, got {type(bounds).__name__}")
        check_bounds(bounds.c_low, bounds.c_high)
        found = bounds
    elif search == "fast":  # inputs are validated: search the masked tokens directly
        r = ratio.detach()[mask].double()
        found = bapo_search.search_tokens(
            r, adv.detach()[mask].double(),
            torch.ones_like(r) if w is None else w.detach()[mask].double(), **grid)
    else:
        found = bapo_search.adaptive_bounds_reference(ratio.detach(), adv, mask, weights=w, **grid)
    out = _clipped_objective(logp, ratio, adv, mask, c_low=found.c_low, c_high=found.c_high,
                             dual_clip_c=dual_clip_c, aggregation=aggregation,
                             norm_length=norm_length, entropy=entropy,
                             loss_denominator=loss_denominator)
    out.bounds = found
    out.metrics.update(rho=None if math.isnan(found.rho) else found.rho,
                       rho_before=None if math.isnan(found.rho_start) else found.rho_start,
                       bapo_steps=found.steps, bapo_reached=found.reached,
                       bapo_undefined=found.undefined)
    return out
