"""cispo: Clipped IS-weight Policy Optimization (MiniMax-M1, arXiv 2506.13585, section 3.1).

    J = sum_{i,t} sg(clip(r_{i,t}, 1 - eps_low, 1 + eps_high)) * A_{i,t} * log pi_theta(o_{i,t})
        / sum_i |o_i|

The IS weight is clipped and detached; the token itself is never dropped, so every token
keeps a gradient, w_t A_t with w_t the clipped weight. token-mean aggregation is the
paper's 1 / sum_i |o_i|.

Clip states: the weight was clipped but the token keeps its gradient, so a clipped token
is `trunc_high` (r > 1 + eps_high, weight cut to the bound) or `trunc_low` (r < 1 - eps_low,
weight raised), whatever the sign of A (the clip does not look at A). `clip_frac`, which
counts tokens that lost their gradient, is 0 for cispo; `trunc_*_frac` count the clipped
weights. c_low / c_high are the weight bounds 1 - eps_low / 1 + eps_high.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from src.algorithms.methods._base import (
    Decision,
    Inputs,
    Method,
    MethodParams,
    TokenObjective,
    register,
)
from src.algorithms.surrogate import NONE, TRUNC_HIGH, TRUNC_LOW
from src.config_fields import above, setting

PAPER = ("MiniMax-M1 section 3.1: 'we did not impose a lower bound on the IS weight by setting "
         "eps_low to a large value'")
VERL = ("the paper tunes eps_high but does not print its value; 0.2 is verl's CISPO example "
        "(examples/cispo_trainer, clip_ratio_high=0.2)")


@dataclass
class CispoParams(MethodParams):
    eps_low: float = setting(10.0, "IS weight lower clip range: bound 1 - eps_low (>= 1: no lower "
                             "bound, as the paper runs it)", above(0), source=PAPER)
    eps_high: float = setting(0.2, "IS weight upper clip range: bound 1 + eps_high", above(0),
                              source=VERL)


@register
class Cispo(Method):
    """No whole-batch decision; the weight clip is per token."""

    name = "cispo"
    Params = CispoParams

    def token_objective(self, x: Inputs, decision: Decision) -> TokenObjective:
        c_low, c_high = 1.0 - self.params.eps_low, 1.0 + self.params.eps_high
        r = x.ratio.detach()
        weight = r.clamp(c_low, c_high)
        state = torch.full(r.shape, NONE, dtype=torch.int8, device=r.device)
        state[x.mask & (r > c_high)] = TRUNC_HIGH
        state[x.mask & (r < c_low)] = TRUNC_LOW
        logp = torch.where(x.mask, x.logp, torch.zeros_like(x.logp))  # padding may hold anything
        value = weight * x.advantages * logp
        return TokenObjective(value, state, weight, x.mask, c_low, c_high)
