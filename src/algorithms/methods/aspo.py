"""aspo: Asymmetric Importance Sampling Policy Optimization (Archer2.0, arXiv 2510.06062).

For tokens with A > 0 the importance weight is flipped: their gradient weight is 1/r instead
of r, so a positive token the policy has already raised pulls less, one it has lowered pulls
more. Negative tokens keep PPO's lower clip. Both signs have a dual clip that keeps a
capped gradient instead of removing it. With r = exp(clamp(log r, -20, 20)):

    A > 0:  r > c_high            J = A / c_high                 (clip_high: no gradient)
            1/r > dual_clip_pos   J = dual_clip_pos * A * log pi  (dual_capped: weight c)
            otherwise             J = A * (r / sg(r)) / sg(r)     (value A / r, weight 1/r)
    A < 0:  r < c_low             J = c_low * A                  (clip_low: no gradient)
            r > dual_clip_neg     J = dual_clip_neg * A * log pi  (dual_capped: weight c)
            otherwise             J = r A

The bounds depend on the token's entropy: the top 20% of a response's tokens by entropy
(above the response's 0.8-quantile, torch.nanquantile's linear interpolation) get the wider
[c_low_high_entropy, c_high_high_entropy] = [0.6, 1.4], the others [c_low, c_high] = [0.8, 1.2].

Source: wizard-III/Archer2.0 at b08d963d5d65909ef1f24dba2f382006d0be33e1,
verl/trainer/ppo/core_algos.py `compute_policy_loss_archer`, called from
verl/workers/actor/dp_actor.py `update_policy` when use_archer_policy_loss (as
scripts/train/run_archer2.0_qwen2.5_1.5b_math.sh sets it), which builds the entropy mask
(token_entropy_quantile 0.8, per response, the current policy's entropies) and passes the
bounds and caps as literals: 0.2 / 0.4 below, 0.2 / 0.4 above, 3.0 and 3.0 (the script's
*_entropy_clip_ratio_* values reach only the non-Archer loss), token-mean. Their variable
`high_entropy_mask` is True for the LOW-entropy tokens (their comment says so), which take
the 0.2 ranges; the top-20% tokens take 0.4.

Decision: the high-entropy tokens (`tokens`), per response over the mini-batch's current
entropies, so it does not depend on how the mini-batch is split. The update record holds
their share (`aspo_high_entropy_frac`). Clip states: `clip_low`, `clip_high`, `dual_capped`;
`weight` is the gradient weight (1/r for kept positive tokens) and, on a clipped token, the
ratio its value uses (1/c_high, c_low). The bounds differ per token: c_low / c_high are None.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from src.algorithms._checks import check_bounds
from src.algorithms.methods._base import (
    Decision,
    DecisionInputs,
    Inputs,
    Method,
    MethodParams,
    TokenObjective,
    register,
)
from src.algorithms.surrogate import CLIP_HIGH, CLIP_LOW, DUAL_CAPPED, NONE
from src.config_fields import above, in_half_open_unit, setting

ACTOR = ("Archer2.0 verl/workers/actor/dp_actor.py, the literals it passes to "
         "compute_policy_loss_archer")
LOG_RATIO_CLAMP = 20.0


@dataclass
class AspoParams(MethodParams):
    c_low: float = setting(0.8, "lower ratio bound of the lower-entropy tokens (A<0 below it: "
                           "no gradient)", source=f"{ACTOR}: negative_low_entropy_clip_ratio_low=0.2")
    c_high: float = setting(1.2, "upper ratio bound of the lower-entropy tokens (A>0 above it: "
                            "no gradient)", source=f"{ACTOR}: positive_low_entropy_clip_ratio_high=0.2")
    c_low_high_entropy: float = setting(
        0.6, "lower ratio bound of a response's top-entropy tokens",
        source=f"{ACTOR}: negative_high_entropy_clip_ratio_low=0.4")
    c_high_high_entropy: float = setting(
        1.4, "upper ratio bound of a response's top-entropy tokens",
        source=f"{ACTOR}: positive_high_entropy_clip_ratio_high=0.4")
    dual_clip_neg: float = setting(3.0, "A<0 tokens with r above it keep the gradient weight "
                                   "dual_clip_neg (value c A log pi)", above(1),
                                   source=f"{ACTOR}: negative_clip_ratio_c=3.0")
    dual_clip_pos: float = setting(3.0, "A>0 tokens with 1/r above it keep the gradient weight "
                                   "dual_clip_pos (value c A log pi)", above(1),
                                   source=f"{ACTOR}: positive_clip_ratio_c=3.0")
    entropy_quantile: float = setting(0.8, "tokens above this quantile of their response's "
                                      "entropies take the high-entropy bounds", in_half_open_unit(),
                                      source="Archer2.0 dp_actor.py: token_entropy_quantile 0.8 "
                                      "(the run script's value too)")

    def validate(self) -> None:
        check_bounds(self.c_low, self.c_high)
        check_bounds(self.c_low_high_entropy, self.c_high_high_entropy, name="c_low_high_entropy")


@register
class Aspo(Method):
    name = "aspo"
    Params = AspoParams
    decides = True
    needs_entropy = True

    def decide(self, inputs: DecisionInputs) -> Decision:
        mask = inputs.mask
        entropy = torch.where(mask, inputs.entropy, torch.full_like(inputs.entropy, float("nan")))
        cut = torch.nanquantile(entropy, q=self.params.entropy_quantile, dim=-1, keepdim=True)
        high = mask & (entropy > cut)  # NaN (padding, empty rows) compares False
        n = int(mask.sum())
        return Decision(tokens=high, record={"aspo_high_entropy_frac": int(high.sum()) / n if n else None})

    def token_objective(self, x: Inputs, decision: Decision) -> TokenObjective:
        if decision.tokens is None or decision.tokens.shape != x.mask.shape:
            raise ValueError("aspo's loss needs its decision (the high-entropy tokens) for this "
                             "batch: call decide() on the mini-batch and take() its rows")
        p, adv, mask = self.params, x.advantages, x.mask
        high = decision.tokens.bool() & mask
        dtype = x.logp.dtype

        def per_token(low_entropy: float, high_entropy: float):
            return torch.where(high, torch.tensor(high_entropy, dtype=dtype, device=adv.device),
                               torch.tensor(low_entropy, dtype=dtype, device=adv.device))

        c_low = per_token(p.c_low, p.c_low_high_entropy)
        c_high = per_token(p.c_high, p.c_high_high_entropy)
        r = x.log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()
        rd = r.detach()
        pos, neg = mask & (adv > 0), mask & (adv < 0)
        clip_high = pos & (rd > c_high)
        dual_pos = pos & (1.0 / torch.minimum(rd, c_high) > p.dual_clip_pos)
        clip_low = neg & (rd < c_low)
        dual_neg = neg & (torch.maximum(rd, c_low) > p.dual_clip_neg)
        logp = torch.where(mask, x.logp, torch.zeros_like(x.logp))
        flipped = adv * (r / rd) / rd  # value A / r, gradient A / r
        value = torch.where(pos, flipped, r * adv)
        value = torch.where(clip_high, adv / c_high, value)
        value = torch.where(clip_low, c_low * adv, value)
        value = torch.where(dual_pos, p.dual_clip_pos * adv * logp, value)
        value = torch.where(dual_neg, p.dual_clip_neg * adv * logp, value)
        weight = torch.where(pos, 1.0 / rd, rd)
        weight = torch.where(clip_high, 1.0 / c_high, weight)
        weight = torch.where(clip_low, c_low, weight)
        weight = torch.where(dual_pos, torch.full_like(weight, p.dual_clip_pos), weight)
        weight = torch.where(dual_neg, torch.full_like(weight, p.dual_clip_neg), weight)
        state = torch.full(adv.shape, NONE, dtype=torch.int8, device=adv.device)
        state[clip_high] = CLIP_HIGH
        state[clip_low] = CLIP_LOW
        state[dual_pos | dual_neg] = DUAL_CAPPED
        return TokenObjective(value, state, weight, mask)
