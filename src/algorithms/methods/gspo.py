"""gspo: Group Sequence Policy Optimization (Zheng et al. 2025, arXiv 2507.18071).

One importance ratio per response, the geometric mean of its token ratios:

    s_i = (pi_theta(y_i|x) / pi_old(y_i|x)) ** (1/|y_i|) = exp(mean_t log r_{i,t})

clipped per response like PPO's token ratio (the paper's Eq. 5), with its small ranges. The
gradient is taken in the paper's GSPO-token form: every token uses
s_{i,t} = sg[s_i] * pi_theta(y_{i,t}) / sg[pi_theta(y_{i,t})], whose value is s_i and whose
gradient flows through that token's own log pi; with one advantage per response this is
GSPO's gradient exactly. Aggregate with seq-mean-token-mean (the yaml's default): the
paper's 1/G sum_i of the per-response objective.

Clip states: a response clipped as a whole (A>0 and s_i > 1 + eps_high, or A<0 and
s_i < 1 - eps_low) puts all its tokens in `clip_high` / `clip_low` (no gradient); c_low /
c_high are these sequence-ratio bounds. `weight` is s_i (dJ/dlogp_t = s_i A per token).
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
from src.algorithms.surrogate import clip_states, clipped_surrogate
from src.config_fields import above, in_open_unit, setting

SOURCE = ("the paper's experiments set 'the left and right clipping ranges in Equation (5) "
          "to 3e-4 and 4e-4'")


@dataclass
class GspoParams(MethodParams):
    eps_low: float = setting(3e-4, "sequence ratio lower clip range: bound 1 - eps_low",
                             in_open_unit(), source=SOURCE)
    eps_high: float = setting(4e-4, "sequence ratio upper clip range: bound 1 + eps_high", above(0),
                              source=SOURCE)


@register
class Gspo(Method):
    """No whole-batch decision: each response's ratio is its own."""

    name = "gspo"
    Params = GspoParams

    def token_objective(self, x: Inputs, decision: Decision) -> TokenObjective:
        c_low, c_high = 1.0 - self.params.eps_low, 1.0 + self.params.eps_high
        lengths = x.mask.sum(dim=-1, keepdim=True).clamp(min=1)
        seq_ratio = (x.log_ratio.detach().sum(dim=-1, keepdim=True) / lengths).exp()  # s_i
        # s_{i,t}: value s_i, d/dlogp_t = s_i (logp's own graph, through exp(logp - sg(logp)))
        own = torch.where(x.mask, x.logp - x.logp.detach(), torch.zeros_like(x.logp)).exp()
        token_seq_ratio = seq_ratio.expand_as(x.logp) * own
        state = clip_states(token_seq_ratio, x.advantages, c_low, c_high)
        value = clipped_surrogate(token_seq_ratio, x.advantages, state, c_low, c_high)
        return TokenObjective(value, state, seq_ratio.expand_as(x.logp), x.mask, c_low, c_high)
