"""Which policy the ratio is taken against (`offpolicy.anchor`), for every method.

- coupled (BAPO Eq. 8, M2PO): r = pi_theta / pi_behaviour, the weights that generated the
  data.
- recompute: the old log-probs are recomputed by the weights at the start of the step, so
  the data's age is invisible to the clip (r = 1 at each step's first update).
- decoupled (AReaL's decoupled PPO): the clip acts on u = pi_theta / pi_prox, pi_prox the
  weights at the start of the step, and each token is multiplied by the behaviour weight
  w_t = sg(pi_prox / pi_behaviour), cut at `cap` by `rule`:
      J_t = w_t * min(u_t A_t, clip(u_t, c_low, c_high) A_t)
  `mask` (AReaL's default): a token with w_t > cap gets w_t = 0 and still counts in the
  token-mean's denominator; `clamp`: w_t = min(w_t, cap) (verl's truncated IS, AReaL's
  opt-in action=clamp). Source: inclusionAI/AReaL at
  4aef98d8d818af55b43621aaadba047ae10f4e77, areal/utils/functional/functional.py
  (`apply_rejection_sampling`, `ppo_actor_loss_fn`) and areal/api/cli_args.py
  (`RejectionSamplingConfig`: level token, action mask, metric ratio, upper 5.0).
The behaviour weight enters in one place, `Method.loss(token_weight=)`, outside the methods.
"""

from __future__ import annotations

import torch
from torch import Tensor

from src.choices import ANCHORS, WEIGHT_RULES  # noqa: F401 - the choices, named in one place (src/choices.py)


def needs_proximal(anchor: str) -> bool:
    """Whether the anchor reads the weights at the start of the step."""
    return anchor != "coupled"


def _raw_weight(logp_prox: Tensor, logp_behavior: Tensor) -> Tensor:
    return (logp_prox.detach() - logp_behavior.detach()).exp()


def behaviour_weight(logp_prox: Tensor, logp_behavior: Tensor, mask: Tensor, cap: float,
                     rule: str) -> Tensor:
    """pi_prox / pi_behaviour per token, detached, cut at `cap` by `rule` (0 above it under
    `mask`, `cap` under `clamp`); 1 on padding. A weight equal to the cap is kept, as
    AReaL's `metric <= upper` keeps it."""
    if rule not in WEIGHT_RULES:
        raise ValueError(f"rule must be one of {WEIGHT_RULES}, got {rule!r}")
    w = _raw_weight(logp_prox, logp_behavior)
    w = torch.where(w > cap, torch.zeros_like(w), w) if rule == "mask" else w.clamp(max=cap)
    return torch.where(mask.bool(), w, torch.ones_like(w))


def capped_share(logp_prox: Tensor, logp_behavior: Tensor, mask: Tensor, cap: float) -> float | None:
    """The share of the response tokens whose behaviour weight is above the cap: the tokens
    the rule masked or clamped (None without response tokens)."""
    mask = mask.bool()
    n = int(mask.sum())
    if n == 0:
        return None
    return int((mask & (_raw_weight(logp_prox, logp_behavior) > cap)).sum()) / n


def anchored(anchor: str, logp_behavior: Tensor, logp_prox: Tensor | None, mask: Tensor,
             cap: float, rule: str) -> tuple[Tensor, Tensor | None]:
    """(the log-probs the ratio is taken against, the behaviour weight or None)."""
    if anchor == "coupled" or logp_prox is None:
        return logp_behavior, None
    if anchor == "recompute":
        return logp_prox, None
    return logp_prox, behaviour_weight(logp_prox, logp_behavior, mask, cap, rule)
