"""dppo_tv and dppo_kl: Divergence Proximal Policy Optimization (Qi et al. 2026, "Rethinking
the Trust Region in LLM Reinforcement Learning", arXiv 2602.04879), Binary-TV and Binary-KL.

A mask on the token's divergence replaces PPO's ratio clip. With p = pi_theta(o_t) and
q = pi_behaviour(o_t) (probabilities, not log-probs) and w = sg(min(r, clip_ratio_c)):

    J_t = valid_t * w_t * A_t * log pi_theta(o_t)

- Binary-TV: a token with A > 0 is invalid where p - q > delta_high, one with A <= 0 where
  p - q < -delta_low.
- Binary-KL: with D = q (log q - log p) + (1 - q) log((1 - q + 1e-8) / (1 - p + 1e-8)), the
  binary KL of the token's Bernoulli, a token with A > 0 is invalid where D > delta_high and
  p > q, one with A <= 0 where D > delta_low and p < q.
The gradient is w A on valid tokens (a truncated-IS policy gradient, as CISPO's) and 0 on
invalid ones, whose loss term is 0.

Source, the authors' code: their PR to verl, github.com/verl-project/verl at
182383bbb58035a5587db6835872977e26441dcd (verl/trainer/ppo/core_algos.py
`compute_policy_loss_dppo_tv`, `compute_policy_loss_dppo_kl`, unchanged at
1dda039b9c6311889a9c9a26040677e1254814f9), with its run script
examples/dppo_trainer/run_qwen30b_dppo.sh (delta 0.15 for TV and 0.05 for KL on both sides,
clip_ratio_c=10000: "Disable dual-clip PPO and TIS for a fair comparison"), and the masks of
sail-sg/Stable-RL at c6af1d119c0fe30d16dd9a837d35fdf695acd226 (verl/trainer/ppo/core_algos.py
`_compute_token_mask_for_policy_loss`), which are the same. Where they differ
(docs/methods.md): Stable-RL takes the ratio and the masks against the rollout engine's
log-probs and clamps log r at 20 above only; verl's clamps it to [-20, 20] and takes them
against `old_log_prob`. Here both are against the behaviour log-probs, what the script
recommends (bypass mode: the ratio against the policy that generated the data), with
verl's clamp.

Clip states: an invalid token with A != 0 is `masked` (no gradient; the loss-side share of
these by sign is clip_frac_pos / clip_frac_neg); a valid one whose weight was cut at
clip_ratio_c is `trunc_high`. No ratio bounds (c_low / c_high None). The update record holds
the mean divergence over the response tokens (`dppo_divergence`: |p - q| or D).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

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
from src.algorithms.surrogate import MASKED, NONE, TRUNC_HIGH
from src.config_fields import finite_above, setting

SCRIPT = ("the authors' run script (verl-project/verl examples/dppo_trainer/run_qwen30b_dppo.sh, "
          "their PR #5397)")
CAP_HELP = ("truncation of the IS weight: w = min(r, clip_ratio_c) (the script's 10000 "
            "disables it; verl's code falls back to 20 when the config has none)")
LOG_RATIO_CLAMP = 20.0  # verl's clamp of log r before the weight
KL_EPS = 1e-8  # the authors' guard in log((1 - q + eps) / (1 - p + eps))


@dataclass
class DppoTvParams(MethodParams):
    delta_low: float = setting(0.15, "TV threshold for tokens with A <= 0: masked where p - q < "
                               "-delta_low", finite_above(0), source=f"{SCRIPT}: clip_ratio_low=0.15")
    delta_high: float = setting(0.15, "TV threshold for tokens with A > 0: masked where p - q > "
                                "delta_high", finite_above(0), source=f"{SCRIPT}: clip_ratio_high=0.15")
    clip_ratio_c: float = setting(10000.0, CAP_HELP, finite_above(0), source=f"{SCRIPT}: clip_ratio_c=10000")


@dataclass
class DppoKlParams(MethodParams):
    delta_low: float = setting(0.05, "binary-KL threshold for tokens with A <= 0: masked where "
                               "D > delta_low and p < q", finite_above(0),
                               source=f"{SCRIPT}: clip_ratio_low=0.05")
    delta_high: float = setting(0.05, "binary-KL threshold for tokens with A > 0: masked where "
                                "D > delta_high and p > q", finite_above(0),
                                source=f"{SCRIPT}: clip_ratio_high=0.05")
    clip_ratio_c: float = setting(10000.0, CAP_HELP, finite_above(0), source=f"{SCRIPT}: clip_ratio_c=10000")


def binary_kl(logp: Tensor, logp_old: Tensor) -> Tensor:
    """The authors' D: q (log q - log p) + (1 - q) log((1 - q + 1e-8) / (1 - p + 1e-8))."""
    p, q = logp.exp(), logp_old.exp()
    return q * (logp_old - logp) + (1 - q) * torch.log((1.0 - q + KL_EPS) / (1.0 - p + KL_EPS))


class _Dppo(Method):
    """The shared loss; subclasses name the divergence."""

    divergence: ClassVar[str]

    def valid(self, logp: Tensor, logp_old: Tensor, adv: Tensor) -> tuple[Tensor, Tensor]:
        """(valid [B, T] bool, the divergence per token), from detached log-probs."""
        p, q = logp.exp(), logp_old.exp()
        lo, hi = self.params.delta_low, self.params.delta_high
        if self.divergence == "tv":
            div = (p - q).abs()
            pos, neg = (p - q) <= hi, (p - q) >= -lo
        else:
            div = binary_kl(logp, logp_old)
            pos, neg = (div <= hi) | (p <= q), (div <= lo) | (p >= q)
        return torch.where(adv > 0, pos, neg), div

    def token_objective(self, x: Inputs, decision: Decision) -> TokenObjective:
        adv, mask = x.advantages, x.mask
        logp = x.logp.detach()
        # padding may hold anything: 0 there (as in x.log_ratio) keeps exp() finite
        logp = torch.where(mask, logp, torch.zeros_like(logp))
        logp_old = torch.where(mask, x.logp_behavior, torch.zeros_like(logp))
        r = x.log_ratio.detach().clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()
        w = r.clamp(max=self.params.clip_ratio_c)
        valid, div = self.valid(logp, logp_old, adv)
        valid = valid & mask
        weight = torch.where(valid, w, torch.zeros_like(w))
        value = weight * adv * torch.where(mask, x.logp, torch.zeros_like(x.logp))
        state = torch.full(adv.shape, NONE, dtype=torch.int8, device=adv.device)
        state[valid & (r > self.params.clip_ratio_c)] = TRUNC_HIGH
        state[mask & ~valid & (adv != 0)] = MASKED
        return TokenObjective(value, state, weight, mask,
                              record={"dppo_divergence": mean_over(div, mask)})


@register
class DppoTv(_Dppo):
    """DPPO-Binary-TV, the authors' default (their script's LOSS_MODE=dppo_tv)."""

    name = "dppo_tv"
    Params = DppoTvParams
    divergence = "tv"


@register
class DppoKl(_Dppo):
    """DPPO-Binary-KL."""

    name = "dppo_kl"
    Params = DppoKlParams
    divergence = "kl"
