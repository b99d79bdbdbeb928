"""clip_cov: Clip-Cov (Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for
Reasoning Language Models", arXiv 2505.22617, the Clip-Cov objective).

The clipped surrogate, and a few more tokens taken out of the gradient: among the tokens
the clip leaves alone, those whose centred covariance term

    cov_t = (A_t - mean A) * (log pi_t - mean log pi)        (means over the mini-batch)

lies in (lb, ub) are candidates, and a random max(1, floor(ratio * N)) of them (N: all
response tokens; fewer if there are fewer candidates) are detached: their loss term is 0,
as the authors' code multiplies it by 0, so they carry neither value nor gradient.

Decision: the detached set (`tokens`), drawn over the whole mini-batch's tokens with a
generator seeded by the caller's per-update seed. The authors take it per micro-batch
with torch's global RNG; here it is one draw per update, so it does not depend on the
micro-batching. Detached tokens are in state `masked`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from src.algorithms.methods._base import (
    Decision,
    DecisionInputs,
    Inputs,
    Method,
    TokenObjective,
    register,
)
from src.algorithms.methods._clipped import ClipParams, clipped_objective
from src.algorithms.surrogate import MASKED, NONE, clip_states
from src.config_fields import in_half_open_unit, setting

REPO = "the authors' recipe (PRIME-RL/Entropy-Mechanism-of-RL, recipe/dapo/7b_clip_cov.sh, same for 32b)"


def centred_covariance(logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(A_t - mean A)(log pi_t - mean log pi), means over the masked tokens; 0 on padding."""
    m = mask.to(logp.dtype)
    n = m.sum().clamp(min=1.0)
    mean_a = (advantages * m).sum() / n
    mean_lp = (torch.where(mask, logp, torch.zeros_like(logp)) * m).sum() / n
    cov = (advantages - mean_a) * (logp - mean_lp)
    return torch.where(mask, cov, torch.zeros_like(cov))


@dataclass
class ClipCovParams(ClipParams):
    c_low: float = setting(0.0, "lower ratio bound of the clipped surrogate",
                           source=f"{REPO}: clip_ratio_low=1, so 1 - 1")
    c_high: float = setting(2.0, "upper ratio bound of the clipped surrogate",
                            source=f"{REPO}: clip_ratio_high=1, so 1 + 1")
    ratio: float = setting(2e-4, "share of all response tokens detached (at least one)",
                           in_half_open_unit(), source="the paper's clip ratio r = 2e-4 (7B and 32B); the recipe's clip_cov_ratio")
    lb: float = setting(1.0, "lower end of the candidates' covariance range (omega_low)",
                        source="the paper's omega_low = 1; the recipe's clip_cov_lb")
    ub: float = setting(5.0, "upper end of the candidates' covariance range (omega_high)",
                        source="the paper's omega_high = 5; the recipe's clip_cov_ub")

    def validate(self) -> None:
        super().validate()
        if not self.lb < self.ub:
            raise ValueError(f"lb must be < ub, got lb={self.lb}, ub={self.ub}")


@register
class ClipCov(Method):
    name = "clip_cov"
    Params = ClipCovParams
    decides = True

    def decide(self, inputs: DecisionInputs) -> Decision:
        p, mask = self.params, inputs.mask
        ratio = inputs.log_ratio.exp()
        unclipped = clip_states(ratio, inputs.advantages, p.c_low, p.c_high, p.dual_clip_c) == NONE
        cov = centred_covariance(inputs.logp, inputs.advantages, mask)
        candidates = (mask & unclipped & (cov > p.lb) & (cov < p.ub)).reshape(-1).nonzero().squeeze(1)
        count = min(max(int(p.ratio * int(mask.sum())), 1), candidates.numel())
        gen = torch.Generator().manual_seed(inputs.seed)
        chosen = candidates[torch.randperm(candidates.numel(), generator=gen, device="cpu")[:count].to(candidates.device)]
        detached = torch.zeros(mask.numel(), dtype=torch.bool, device=mask.device)
        detached[chosen] = True
        return Decision(tokens=detached.view_as(mask),
                        record={"cov_candidates": int(candidates.numel()), "cov_selected": count})

    def token_objective(self, x: Inputs, decision: Decision) -> TokenObjective:
        p = self.params
        t = clipped_objective(x, p.c_low, p.c_high, p.dual_clip_c)
        if decision.tokens is None or decision.tokens.shape != x.mask.shape:
            raise ValueError("clip_cov's loss needs its decision (the detached tokens) for this "
                             "batch: call decide() on the mini-batch and take() its rows")
        detached = decision.tokens.bool() & x.mask
        t.state = torch.where(detached, torch.full_like(t.state, MASKED), t.state)
        t.value = torch.where(detached, torch.zeros_like(t.value), t.value)
        return t
