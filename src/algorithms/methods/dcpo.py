"""dcpo: Dynamic Clipping Policy Optimization (Yang et al. 2025, arXiv 2509.02333), its dynamic
adaptive clipping (DAC).

PPO's clipped surrogate with a dual clip, but each token's bounds depend on its behaviour
probability q = pi_behaviour(o_t): the ratio is held to |(r - 1) r q| <= eps, so

    c_low(q)  = (1 + sqrt(max(1 - 4 eps_low / q, 0))) / 2           (0.5 for q <= 4 eps_low)
    c_high(q) = min((1 + sqrt(1 + 4 eps_high / q)) / 2, max(dual_clip_c, 10))

The rarer the token, the wider its bounds: at q = 1, [0.724, 1.228] (eps 0.2, 0.28); at
q = 0.01, [0.5, 5.8]. J_t = min(r A, clip(r, c_low(q), c_high(q)) A), and for A < 0
max(J_t, dual_clip_c A).

Source: lime-RL/DCPO at 01787b0f61580961162faeb492defeb39f1eba53, verl/trainer/ppo/core_algos.py
`get_clip_low_high` and `compute_policy_loss_dcpo` with clip_type "dynamic", run by
recipe/dcpo/run_dcpo.sh through recipe/dcpo/run_base.sh: CLIP_TYPE=dynamic,
clip_ratio_low 0.2 (run_base's default), CLIP_RATIO_HIGH=0.28, CLIP_RATIO_C=10. The paper's
table of bounds uses eps_low 0.16 and eps_high 0.2; this follows the script. The script also
runs DCPO's advantage (SAS, `ADV_ESTIMATOR=dcpo`) and its OTM aggregation
(`only-token-mean`): neither is part of the loss here (docs/methods.md).

The bounds are computed in the behaviour log-probs' dtype, as the authors' are. Where their
code gives no number, this gives the formula's limit: for q below ~2.4e-39 in float32
(log q < -88.9) 4 eps / q overflows and their c_low is NaN, and at q = 0 exactly it is 1;
here it is 0.5 in both cases.

Clip states: `clip_low`, `clip_high` and `dual`, as ppo's. The bounds differ per token, so
c_low / c_high are None (the token files' columns are NaN); `weight` on a clipped token is
its own bound, so the value reading of the metrics is the surrogate's. The update record
holds the mean bound on the side each sign is clipped at: c_low over the A < 0 tokens
(`dcpo_c_low_neg`), c_high over the A > 0 ones (`dcpo_c_high_pos`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from src.algorithms.methods._base import (
    Decision,
    Inputs,
    Method,
    MethodParams,
    TokenObjective,
    mean_over,
    register,
)
from src.algorithms.surrogate import CLIP_HIGH, CLIP_LOW, DUAL, NONE
from src.config_fields import above, finite_above, setting

SCRIPT = "lime-RL/DCPO recipe/dcpo/run_dcpo.sh (via run_base.sh)"
HIGH_CAP_FLOOR = 10.0  # the authors' `max(clip_ratio_c, 10)` ("at least 10")


@dataclass
class DcpoParams(MethodParams):
    eps_low: float = setting(0.2, "lower clip budget: A<0 tokens are clipped below "
                             "(1 + sqrt(max(1 - 4 eps_low / q, 0))) / 2", finite_above(0),
                             source=f"{SCRIPT}: clip_ratio_low=0.2 (the paper's table: 0.16)")
    eps_high: float = setting(0.28, "upper clip budget: A>0 tokens are clipped above "
                              "(1 + sqrt(1 + 4 eps_high / q)) / 2", finite_above(0),
                              source=f"{SCRIPT}: CLIP_RATIO_HIGH=0.28 (the paper's table: 0.2)")
    dual_clip_c: float = setting(10.0, "dual clip: for A<0, J = max(J, c A) (state `dual`); also "
                                 "caps c_high at max(c, 10)", above(1), source=f"{SCRIPT}: CLIP_RATIO_C=10.0")


def dynamic_bounds(logp_behavior: Tensor, eps_low: float, eps_high: float,
                   dual_clip_c: float) -> tuple[Tensor, Tensor]:
    """Per-token (c_low, c_high) from the behaviour log-probs, in their dtype."""
    q = logp_behavior.exp()
    low_arg = 1.0 - 4.0 * eps_low / q  # -inf where q underflows to 0: the floor below takes it
    low_arg = torch.where(low_arg >= 0, low_arg, torch.zeros_like(q))
    high_arg = torch.where(q != 0, 1.0 + 4.0 * eps_high / q, torch.full_like(q, float("inf")))
    c_low = (1.0 + low_arg.sqrt()) / 2.0
    c_high = ((1.0 + high_arg.sqrt()) / 2.0).clamp(0.0, max(dual_clip_c, HIGH_CAP_FLOOR))
    return c_low, c_high


@register
class Dcpo(Method):
    """No whole-batch decision: each token's bounds follow from its behaviour probability."""

    name = "dcpo"
    Params = DcpoParams

    def token_objective(self, x: Inputs, decision: Decision) -> TokenObjective:
        p, adv, mask = self.params, x.advantages, x.mask
        c_low, c_high = dynamic_bounds(x.logp_behavior, p.eps_low, p.eps_high, p.dual_clip_c)
        r = x.ratio
        rd = r.detach()
        state = torch.full(adv.shape, NONE, dtype=torch.int8, device=adv.device)
        state[(adv > 0) & (rd > c_high)] = CLIP_HIGH
        state[(adv < 0) & (rd < c_low)] = CLIP_LOW
        state[(adv < 0) & (rd > p.dual_clip_c)] = DUAL
        bound = torch.where(state == CLIP_HIGH, c_high, c_low)
        clipped = (state == CLIP_HIGH) | (state == CLIP_LOW)
        value = torch.where(clipped, bound * adv, r * adv)
        value = torch.where(state == DUAL, p.dual_clip_c * adv, value)
        weight = torch.where(clipped, bound, rd)  # clipped: the value's ratio (no gradient)
        state = torch.where(mask, state, torch.zeros_like(state))
        record = {"dcpo_c_low_neg": mean_over(c_low, mask & (adv < 0)),
                  "dcpo_c_high_pos": mean_over(c_high, mask & (adv > 0))}
        return TokenObjective(value, state, weight, mask, record=record)
