"""kl_cov: KL-Cov (Cui et al. 2025, arXiv 2505.22617, the KL-Cov objective).

No clipping: the plain surrogate r_t A_t on every token, and the top share `ratio` of
the tokens by the centred covariance term (A_t - mean A)(log pi_t - mean log pi) (at least
one) also pay a penalty coef * |log r_t|:

    J_t = r_t A_t - coef * |log r_t|   if t is in the top-k set,   r_t A_t otherwise.

Decision: the top-k set (`tokens`), over the whole mini-batch's tokens (ties by row-major
position). Those tokens are in state `kl_penalty`: they keep their policy gradient, plus
the penalty's. `weight` is r_t (the penalty's own gradient is not a policy-gradient
contribution and is left out of the contribution metrics).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from src.algorithms.methods._base import (
    Decision,
    DecisionInputs,
    Inputs,
    Method,
    MethodParams,
    TokenObjective,
    register,
)
from src.algorithms.methods.clip_cov import centred_covariance
from src.algorithms.surrogate import KL_PENALTY, NONE
from src.config_fields import at_least, in_half_open_unit, setting

REPO = "PRIME-RL/Entropy-Mechanism-of-RL recipe/dapo/7b_kl_cov.sh"


@dataclass
class KlCovParams(MethodParams):
    ratio: float = setting(2e-3, "share of the response tokens with the largest covariance that "
                           "pay the penalty (at least one)", in_half_open_unit(),
                           source=f"the paper's k = 2e-3 for Qwen2.5-7B (2e-4 for Qwen2.5-32B); {REPO}: "
                           "k_percent=0.2, in percent")
    coef: float = setting(1.0, "penalty coefficient beta on |log r|", at_least(0),
                          source=f"the paper's beta = 1; {REPO}: ppo_kl_coef=1")


@register
class KlCov(Method):
    name = "kl_cov"
    Params = KlCovParams
    decides = True

    def decide(self, inputs: DecisionInputs) -> Decision:
        mask = inputs.mask
        candidates = mask.reshape(-1).nonzero().squeeze(1)
        cov = centred_covariance(inputs.logp, inputs.advantages, mask).reshape(-1)[candidates]
        k = max(1, int(candidates.numel() * self.params.ratio))
        order = torch.sort(-cov.double(), stable=True).indices  # largest first, ties by position
        top = torch.zeros(mask.numel(), dtype=torch.bool, device=mask.device)
        top[candidates[order[:k]]] = True
        return Decision(tokens=top.view_as(mask))

    def token_objective(self, x: Inputs, decision: Decision) -> TokenObjective:
        if decision.tokens is None or decision.tokens.shape != x.mask.shape:
            raise ValueError("kl_cov's loss needs its decision (the penalised tokens) for this "
                             "batch: call decide() on the mini-batch and take() its rows")
        penalised = decision.tokens.bool() & x.mask
        value = x.ratio * x.advantages
        value = torch.where(penalised, value - self.params.coef * x.log_ratio.abs(), value)
        state = torch.where(penalised, KL_PENALTY, NONE).to(torch.int8)
        return TokenObjective(value, state, x.ratio.detach(), x.mask)
