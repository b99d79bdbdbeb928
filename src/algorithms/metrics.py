"""Per-update metrics, computed once from an update's `PolicyLossOutput`.

The same readings for every method, from what each method declares per token: its clip
state (`surrogate.CLIP_STATES`), its gradient weight (dJ_t/dlogp_t = w_t A_t where the
state keeps a gradient) and its bounds.

- clip fractions: `clip_frac` is the share of the loss-bearing tokens whose gradient the
  method removed (states clip_low, clip_high, dual, masked); each state has its own share.
- contribution, gradient reading: sum over gradient-carrying tokens of |w_t A_t|, by sign.
- contribution, value reading (literal Eq. 8 of the BAPO paper): |sum of A_t v_t| by sign,
  with v_t the ratio the surrogate's value uses: the bound where a token is clipped at it,
  0 where it is masked, w_t otherwise (no dual-clip branch, as Eq. 8 has none).
- Eq. 6 of the BAPO paper: Cov(log pi, A X) with X = 1 on gradient-carrying tokens.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from src.algorithms.methods import PolicyLossOutput
from src.algorithms.surrogate import (
    CLIP_HIGH,
    CLIP_LOW,
    CLIP_STATES,
    MASKED,
    NONE,
    carries_gradient,
)
from src.run_vocab import STATE_FRACTIONS  # the share of loss-bearing tokens in each state


def _safe_div(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def update_metrics(out: PolicyLossOutput, advantages: Tensor, mask: Tensor, logp: Tensor,
                   entropy: Tensor | None = None) -> dict[str, Any]:
    """The update record's method metrics for the batch `out` was computed on.

    `advantages` per token [B, T] or per response [B]; `mask` the response tokens; `logp`
    and `entropy` the current policy's. Computed on the masked tokens only (flattened first),
    so padding costs nothing. The decision's own record (BAPO's rho, ...) is merged in.
    """
    mask = mask.bool()
    r, w, a, st, il, lp = _flat(out, advantages, mask, logp)
    pos, neg = (a > 0) & il, (a < 0) & il
    carries = il & carries_gradient(st)
    clipped = il & ~carries
    kinds = torch.bincount(st[il].long(), minlength=len(CLIP_STATES)).tolist()
    n_in, n_pos, n_neg = int(il.sum()), int(pos.sum()), int(neg.sum())
    grad = w * a.abs()
    grad_pos, grad_neg = float(grad[pos & carries].sum()), float(grad[neg & carries].sum())
    value_pos, value_neg = _value_contributions(out, w, a, st, pos, neg)
    log_r = r.log()
    ax = a * carries
    cov = float(((lp - lp.mean()) * (ax - ax.mean())).mean())
    n_signed = n_pos + n_neg
    share = _safe_div(grad_pos, grad_pos + grad_neg)
    record: dict[str, Any] = {
        "tokens_in_loss": n_in,
        "tokens_pos": n_pos,
        "tokens_neg": n_neg,
        "tokens_zero": n_in - n_signed,
        "token_share_pos": _safe_div(n_pos, n_signed),
        "token_share_neg": _safe_div(n_neg, n_signed),
        "clip_frac": _safe_div(int(clipped.sum()), n_in),
        **{key: _safe_div(kinds[state], n_in) for key, state in STATE_FRACTIONS.items()},
        "clip_frac_pos": _safe_div(int((clipped & pos).sum()), n_pos),
        "clip_frac_neg": _safe_div(int((clipped & neg).sum()), n_neg),
        "contrib_grad_pos": grad_pos,
        "contrib_grad_neg": grad_neg,
        "contrib_grad_pos_share": share,
        "contrib_value_pos": value_pos,
        "contrib_value_neg": value_neg,
        "contrib_value_pos_share": _safe_div(value_pos, value_pos + value_neg),
        "ratio_mean": float(r.mean()),
        "abs_log_ratio_mean": float(log_r.abs().mean()),
        "kl_k3": float(((r - 1.0) - log_r).mean()),
        "entropy_clip_cov": cov,
        "entropy_mean": float(entropy.detach()[mask].double().mean()) if entropy is not None else None,
        "zero_advantage": n_signed == 0,
        "c_low": out.c_low,
        "c_high": out.c_high,
        # rho is BAPO's; every method logs the gradient share under it as a diagnostic.
        "rho": share,
        "rho_before": share,
        "bapo_steps": 0,
        "bapo_reached": None,
        "bapo_undefined": None,
    }
    record.update(out.decision.record)
    return record


def _flat(out: PolicyLossOutput, advantages: Tensor, mask: Tensor, logp: Tensor):
    """The masked tokens, flattened: ratio, gradient weight and advantage (fp64), clip state,
    in-loss flag, logp (fp64)."""
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(mask)
    r = out.ratio.detach()[mask].double()
    w = out.weight.detach()[mask].double()
    # as the loss saw them: in the log-probs' dtype
    a = advantages.detach().to(out.ratio.device, out.ratio.dtype)[mask].double()
    st, il = out.clip_state[mask], out.in_loss[mask]
    lp = logp.detach()[mask].double()
    return r, w, a, st, il, lp


def _value_contributions(out: PolicyLossOutput, w: Tensor, a: Tensor, st: Tensor, pos: Tensor,
                         neg: Tensor) -> tuple[float, float]:
    """Eq. 8's value reading, by sign: |A_t v_t| summed, v_t the bound where a token is
    clipped at it, 0 where it is masked, w_t otherwise."""
    value_ratio = w
    if out.c_high is not None:
        value_ratio = torch.where(st == CLIP_HIGH, out.c_high, value_ratio)
    if out.c_low is not None:
        value_ratio = torch.where(st == CLIP_LOW, out.c_low, value_ratio)
    value_ratio = torch.where(st == MASKED, 0.0, value_ratio)
    value = (value_ratio * a).abs()
    return float(value[pos].sum()), float(value[neg].sum())


__all__ = ["NONE", "STATE_FRACTIONS", "update_metrics"]
