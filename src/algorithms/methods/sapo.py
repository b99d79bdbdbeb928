"""sapo: Soft Adaptive Policy Optimization (Gao et al. 2025, Qwen, arXiv 2511.20347).

A soft gate replaces the hard clip. Per token, with tau = tau_pos where A > 0 and tau_neg
where A <= 0,

    J_t = f(r_t) A_t,    f(r) = sigmoid(tau (r - 1)) * 4 / tau,

so dJ_t/dlogp_t = 4 s (1 - s) r A with s = sigmoid(tau (r - 1)): the gate factor
4 s (1 - s) is 1 at r = 1 and fades smoothly on both sides; no token loses its gradient.

The paper's authors published no code. The authority is the two frameworks that ship it:
- verl `compute_policy_loss_sapo` (volcengine/verl at b178a3cd56f58b2d502255daba591e92833930a7,
  verl/trainer/ppo/core_algos.py; tau_pos 1.0 and tau_neg 1.05 in
  verl/trainer/config/actor/actor.yaml, "the values used in the paper with
  Qwen3-30B-A3B-Base"; examples/sapo_trainer/run_qwen30b_sapo.sh): clamps log r to
  [-20, 20] first, and aggregates seq-mean-token-mean whatever loss_agg_mode says.
- TRL `loss_type="sapo"` (huggingface/trl at f2cd57710ae345ea6428ae95363267fcf38a3dc8,
  trl/trainer/grpo_trainer.py `_compute_loss`; `sapo_temperature_pos` 1.0 and
  `sapo_temperature_neg` 1.05 in trl/trainer/grpo_config.py): the same gate, no clamp of
  log r, seq-mean-token-mean over the micro-batch's rows.
This follows verl (the clamp); the two agree wherever |log r| <= 20. The yaml sets
seq-mean-token-mean, as both force it. docs/methods.md lists the other differences.

Clip states: `gated` where the gate keeps less than half of the token's plain-surrogate
gradient (4 s (1 - s) < 1/2, i.e. |r - 1| > 1.763 / tau), else `none`; a token whose log r
was clamped has no gradient (as in verl) and is `masked`. `weight` is 4 s (1 - s) r. The
update record holds the mean gate factor over the A > 0 and the A < 0 tokens
(`sapo_gate_pos`, `sapo_gate_neg`): the continuous reading of what the gate did; and the
positive share of the gradient as the aggregation weighs the tokens (`sapo_grad_pos_share`),
which `contrib_grad_pos_share` (every token alike) does not: under the per-response mean the
tokens of short responses weigh more.
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
    mean_over,
    register,
)
from src.algorithms.surrogate import GATED, MASKED, NONE
from src.config_fields import finite_above, setting

SOURCE = ("verl's actor.yaml (tau_pos 1.0, tau_neg 1.05: 'the values used in the paper with "
          "Qwen3-30B-A3B-Base'); TRL's sapo_temperature_pos/neg defaults")
# A token is `gated` where the gate keeps less than this share of its r A gradient.
GATED_BELOW = 0.5
# verl clamps log r to this range before the gate (TRL does not).
LOG_RATIO_CLAMP = 20.0


@dataclass
class SapoParams(MethodParams):
    tau_pos: float = setting(1.0, "gate temperature for tokens with A > 0 (larger: the gate "
                             "closes nearer r = 1)", finite_above(0), source=SOURCE)
    tau_neg: float = setting(1.05, "gate temperature for tokens with A <= 0", finite_above(0),
                             source=SOURCE)


@register
class Sapo(Method):
    """No whole-batch decision: each token's gate is its own."""

    name = "sapo"
    Params = SapoParams

    def token_objective(self, x: Inputs, decision: Decision) -> TokenObjective:
        p, adv = self.params, x.advantages
        log_r = x.log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        r = log_r.exp()
        tau = torch.where(adv > 0, torch.full_like(adv, p.tau_pos), torch.full_like(adv, p.tau_neg))
        s = torch.sigmoid(tau * (r - 1.0))
        value = s * (4.0 / tau) * adv
        lr = x.log_ratio.detach()
        clamped = x.mask & ((lr < -LOG_RATIO_CLAMP) | (lr > LOG_RATIO_CLAMP))
        gate = (4.0 * s * (1.0 - s)).detach()
        weight = torch.where(clamped, torch.zeros_like(gate), gate * r.detach())
        state = torch.full(adv.shape, NONE, dtype=torch.int8, device=adv.device)
        state[x.mask & (gate < GATED_BELOW)] = GATED
        state[clamped] = MASKED
        record = {"sapo_gate_pos": mean_over(gate, x.mask & (adv > 0)),
                  "sapo_gate_neg": mean_over(gate, x.mask & (adv < 0)),
                  "sapo_grad_pos_share": self._aggregated_share(weight, adv, x.mask)}
        return TokenObjective(value, state, weight, x.mask, record=record)

    def _aggregated_share(self, weight, adv, mask) -> float | None:
        """The positive tokens' share of sum |w A| with each token weighted as the loss's
        aggregation weighs it (seq-mean-token-mean: 1 / its response's length). The metrics'
        `contrib_grad_pos_share` weighs every token alike, which is this under token-mean; under
        the per-response mean that sapo runs, short responses' tokens weigh more."""
        per_token = torch.ones_like(weight)
        if self.aggregation == "seq-mean-token-mean":
            per_token = 1.0 / mask.sum(dim=-1, keepdim=True).clamp(min=1).to(weight.dtype).expand_as(weight)
        g = (weight * adv.abs() * per_token).detach().double()
        pos, neg = float(g[mask & (adv > 0)].sum()), float(g[mask & (adv < 0)].sum())
        return pos / (pos + neg) if pos + neg > 0 else None
