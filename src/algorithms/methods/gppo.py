"""gppo: Gradient-Preserving clipping Policy Optimization (Klear-Reasoner, Su et al. 2025,
arXiv 2508.07629), and with other betas CE-GPPO (arXiv 2509.20712; conf/method/ce_gppo.yaml).

The forward value is Clip-Higher's (with the dual clip), but a token clipped on the side its
advantage pushes keeps a bounded gradient:

    A < 0, r < c_low:   J_t = beta1 * c_low  * A * r / sg(r)   (value beta1 c_low A, grad beta1 c_low A)
    A > 0, r > c_high:  J_t = beta2 * c_high * A * r / sg(r)   (value beta2 c_high A, grad beta2 c_high A)
    A < 0, r > dual_clip_c: J_t = dual_clip_c * A              (the dual clip: no gradient)
    otherwise:          J_t = r A

Source: Kwai-Klear/KlearReasoner at 3422f6d36a8251cb1c86a7b943c7c815850864fd,
verl/trainer/ppo/core_algos.py `compute_gppo_loss` (beta1 = beta2 = 1: the clamp bounds
`(1 -+ eps) / ratio.detach() * ratio`) and `compute_gppo_loss_general_beta` (any betas), called
from verl/workers/actor/dp_actor.py; the math run recipe/dapo/perf_run_dapo_ours_math.sh
(clip_ratio_low 0.2, clip_ratio_high 0.28, clip_ratio_c 10, token-mean, loss_func gppo: the
config default) and the README ("Empirically we set beta1 = beta2 = 1"). With beta != 1
the value of a clipped token is scaled by beta too (the general function's forward value is
beta (1 -+ eps) A, not Clip-Higher's); both functions agree at beta = 1.

Clip states: `preserved_low` / `preserved_high` for the clipped tokens that keep a gradient,
`dual` for the dual clip; `weight` there is beta c_low / beta c_high (the gradient's weight,
and the value's ratio).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from src.algorithms.methods._base import Decision, Inputs, Method, TokenObjective, register
from src.algorithms.methods._clipped import DUAL_CHECK, DUAL_HELP, ClipParams
from src.algorithms.surrogate import (
    CLIP_HIGH,
    CLIP_LOW,
    DUAL,
    PRESERVED_HIGH,
    PRESERVED_LOW,
    clip_states,
)
from src.config_fields import finite_at_least, setting

RECIPE = "KlearReasoner recipe/dapo/perf_run_dapo_ours_math.sh"
README = "KlearReasoner README: 'Empirically we set beta1 = beta2 = 1'"


@dataclass
class GppoParams(ClipParams):
    c_low: float = setting(0.8, "lower ratio bound: the value of A<0 tokens with r < c_low is "
                           "clipped, their gradient kept at beta1 c_low A",
                           source=f"{RECIPE}: clip_ratio_low=0.2")
    c_high: float = setting(1.28, "upper ratio bound: the value of A>0 tokens with r > c_high is "
                            "clipped, their gradient kept at beta2 c_high A",
                            source=f"{RECIPE}: clip_ratio_high=0.28")
    dual_clip_c: float | None = setting(10.0, DUAL_HELP, DUAL_CHECK,
                                        source=f"{RECIPE}: clip_ratio_c=10.0")
    beta1: float = setting(1.0, "scale of the kept gradient (and value) of A<0 tokens below "
                           "c_low (0: no gradient there, as under ppo's clip)", finite_at_least(0), source=README)
    beta2: float = setting(1.0, "scale of the kept gradient (and value) of A>0 tokens above "
                           "c_high (0: no gradient there, as under ppo's clip)", finite_at_least(0), source=README)


@register
class Gppo(Method):
    """No whole-batch decision: the bounds are fixed."""

    name = "gppo"
    Params = GppoParams

    def token_objective(self, x: Inputs, decision: Decision) -> TokenObjective:
        p, adv = self.params, x.advantages
        r = x.ratio
        rd = r.detach()
        state = clip_states(rd, adv, p.c_low, p.c_high, p.dual_clip_c)
        low, high, dual = state == CLIP_LOW, state == CLIP_HIGH, state == DUAL
        # the clipped tokens' gradient weight: beta * bound, through r / sg(r) (value 1)
        weight = torch.where(low, p.beta1 * p.c_low, torch.where(high, p.beta2 * p.c_high, rd))
        kept = torch.where(low | high, weight * (r / rd), r)
        value = kept * adv
        if p.dual_clip_c is not None:
            value = torch.where(dual, p.dual_clip_c * adv, value)
        state = torch.where(low, PRESERVED_LOW, torch.where(high, PRESERVED_HIGH, state)).to(torch.int8)
        return TokenObjective(value, state, weight.to(rd.dtype), x.mask, p.c_low, p.c_high)
