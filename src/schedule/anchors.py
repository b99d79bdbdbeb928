"""Which policy the ratio is taken against (`offpolicy.anchor`), for every method.

- coupled (BAPO Eq. 8, M2PO): r = pi_theta / pi_behaviour, the weights that generated the
  data.
- recompute: the old log-probs are recomputed by the weights at the start of the step, so
  the data's age is invisible to the clip (r = 1 at each step's first update).
- decoupled (AReaL's decoupled PPO): the clip acts on u = pi_theta / pi_prox, pi_prox the
  weights at the start of the step, and each token is multiplied by the behaviour weight
  sg(pi_prox / pi_behaviour) truncated at `cap`:
      J_t = w_t * min(u_t A_t, clip(u_t, c_low, c_high) A_t),  w_t = min(pi_prox/pi_b, cap).
The behaviour weight enters in one place, `Method.loss(token_weight=)`, outside the methods.
"""

from __future__ import annotations

import torch
from torch import Tensor

ANCHORS = ("coupled", "recompute", "decoupled")


def needs_proximal(anchor: str) -> bool:
    """Whether the anchor reads the weights at the start of the step."""
    return anchor != "coupled"


def behaviour_weight(logp_prox: Tensor, logp_behavior: Tensor, mask: Tensor, cap: float) -> Tensor:
    """min(pi_prox / pi_behaviour, cap) per token, detached; 1 on padding."""
    w = (logp_prox.detach() - logp_behavior.detach()).exp().clamp(max=cap)
    return torch.where(mask.bool(), w, torch.ones_like(w))


def anchored(anchor: str, logp_behavior: Tensor, logp_prox: Tensor | None, mask: Tensor,
             cap: float) -> tuple[Tensor, Tensor | None]:
    """(the log-probs the ratio is taken against, the behaviour weight or None)."""
    if anchor == "coupled" or logp_prox is None:
        return logp_behavior, None
    if anchor == "recompute":
        return logp_prox, None
    return logp_prox, behaviour_weight(logp_prox, logp_behavior, mask, cap)
