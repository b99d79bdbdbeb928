"""m2po: Second-Moment Trust Policy Optimization (Zheng, Zhao and Chen 2025, arXiv 2510.01161),
as the authors' code runs it.

Source: github.com/Infini-AI-Lab/M2PO at 4514ce22cc5af605b150d3bb7d0deab82f783acd,
verl/trainer/ppo/core_algos.py (`compute_m2po_policy_loss`, `kpo_clip_harmful_tokens`,
`_get_trust_region_tokens_delta_sq`, `_solve_tau_from_sorted_delta2`), run with
`M2_budget=0.04` and no `miniclip_low/high` floors (train-scripts/m2po-qwen-math-7b-s256.sh).
Where the code and the paper's prose differ, this follows the code:

1. Harmful tokens are those the policy has already moved the way their advantage pushes:
   A > 0 with r > 1, or A < 0 with r < 1 (the authors' margins: |A| > 1e-12, |r - 1| > 1e-12).
2. M2 is the mean of (log r)^2 over the harmful tokens only. With no harmful token, or
   M2 <= budget, nothing is clipped.
3. Otherwise a threshold tau is solved from the harmful tokens' sorted (log r)^2
   (`solve_tau`), and every token gets PPO's clipped surrogate at [e^-tau, e^tau]:
   J_t = min(r A, clip(r, e^-tau, e^tau) A). The clip only cuts harmful tokens beyond tau;
   the others keep r A and their gradient, as under ppo.
Aggregation: token-mean, the authors' `agg_loss`.

Decision: the bounds, taken like every method's on the whole mini-batch, so that
`train.micro_batch_size` changes no number. The authors decide per micro-batch of their
trainer (verl's dp_actor `update_policy`: each GPU's micro-batches, each a token-mean scaled
by its share of the mini-batch); that is this rule when one micro-batch holds the
mini-batch, and through the verl plug (src/integrations/verl_losses.py) the decision is per
verl micro-batch, as theirs. The record holds the harmful tokens' M2 before and after the
cap at tau, tau (None: no clip) and their count.

Where the authors' code would raise (tau^2 = v - 1e-12 < 0 at the breakpoint, or a budget
at most 1e-12 per token), tau is 0 here. A ratio exactly on a bound keeps its gradient
(surrogate.py); their torch.maximum halves it there, which only an exact tie (tau = 0 and
r == 1 exactly) can reach.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from src.algorithms.methods._base import (
    Decision,
    DecisionInputs,
    Inputs,
    Method,
    MethodParams,
    TokenObjective,
    register,
)
from src.algorithms.methods._clipped import clipped_objective
from src.config_fields import finite_above, setting
from src.run_vocab import MethodTraits

SOURCE = ("the authors' run, train-scripts/m2po-qwen-math-7b-s256.sh in Infini-AI-Lab/M2PO "
          "(+actor_rollout_ref.actor.M2_budget=0.04); the paper's tau_M2 = 0.04")
# The authors' margins: an advantage or a ratio within these of 0 and 1 is not "moved".
MARGIN = 1e-12
# The authors' bounds when nothing is clipped ([1 - 1, 1 + (100000 - 1)]): a ratio above
# 1e5 is still clipped there, so these stand in the loss while the record says "no clip"
# (c_low/c_high None, so step means of the bounds average only the updates that clipped).
NO_CLIP = (0.0, 100000.0)


def harmful_tokens(log_ratio: Tensor, advantages: Tensor, mask: Tensor) -> Tensor:
    """[B, T] bool: response tokens with A > 0 and r > 1, or A < 0 and r < 1 (the authors'
    margins, compared in the log-probs' own dtype as their code compares them)."""
    r = log_ratio.exp()
    return mask & (((advantages > MARGIN) & (r > 1.0 + MARGIN))
                   | ((advantages < -MARGIN) & (r < 1.0 - MARGIN)))


def solve_tau(sorted_sq: Tensor, budget: float) -> float:
    """tau for the harmful tokens' ascending (log r)^2 `v` (float64) whose mean is above
    `budget`: the authors' breakpoint rule.

    With S = budget * n, k is the first index at which capping every value after it at v_k
    would already reach S: (v_k - 1e-12) (n - k - 1) + sum_{i <= k} v_i >= S - 1e-12. The cap
    is the value below it, tau^2 = v_{k-1} - 1e-12 (k = 0: tau = 0), which leaves the capped
    mean under the budget.
    """
    n = sorted_sq.numel()
    target = budget * float(n)
    if target <= MARGIN:  # the authors' "clip everything" branch
        return 0.0
    rest = torch.arange(n - 1, -1, -1, dtype=sorted_sq.dtype, device=sorted_sq.device)
    reached = (sorted_sq - MARGIN) * rest + sorted_sq.cumsum(0) >= target - MARGIN
    # At k = n - 1 the condition is sum(v) >= S, true whenever the mean is above the budget;
    # set so that no rounding of the two sums can leave the search without an answer.
    reached[-1] = True
    k = int(reached.nonzero()[0])
    if k == 0:
        return 0.0
    return max(float(sorted_sq[k - 1]) - MARGIN, 0.0) ** 0.5


def ratio_bounds(tau: float) -> tuple[float, float]:
    """[e^-tau, e^tau] rounded as the authors' code rounds them: exp of a float32 tensor, then
    through their clip ranges 1 - c_low and c_high - 1 and back, so the bounds are theirs
    to the last bit."""
    # Scalars, on the CPU whatever the inputs' device: only their float values leave here.
    low = float(torch.exp(torch.tensor(-tau, dtype=torch.float32, device="cpu")))
    high = float(torch.exp(torch.tensor(tau, dtype=torch.float32, device="cpu")))
    return 1.0 - (1.0 - low), 1.0 + (high - 1.0)


@dataclass(frozen=True)
class M2poBounds:
    """What m2po decided for a mini-batch: its clip bounds, or none (tau None)."""

    tau: float | None
    c_low: float
    c_high: float


@dataclass
class M2poParams(MethodParams):
    budget: float = setting(0.04, "largest second moment of the harmful tokens' log-ratios left "
                            "after the clip (the authors' M2_budget)", finite_above(0),
                            source=SOURCE)


@register
class M2po(Method):
    name = "m2po"
    Params = M2poParams
    decides = True
    traits = MethodTraits(adaptive_bounds=True, target="budget", measure="m2_harmful_after",
                          measure_at_start="m2_harmful")

    def decide(self, inputs: DecisionInputs) -> Decision:
        budget = self.params.budget
        log_r = inputs.log_ratio
        harmful = harmful_tokens(log_r, inputs.advantages, inputs.mask)
        sq = (log_r[harmful] ** 2).double()
        n = sq.numel()
        m2 = float(sq.sum()) / n if n else None
        tau = None
        if m2 is not None and m2 > budget + MARGIN:
            tau = solve_tau(torch.sort(sq).values, budget)
        if tau is None:
            bounds, after = M2poBounds(None, *NO_CLIP), m2
        else:
            bounds, after = M2poBounds(tau, *ratio_bounds(tau)), float(sq.clamp(max=tau * tau).mean())
        return Decision(data=bounds, record={"m2_harmful": m2, "m2_harmful_after": after,
                                             "m2po_tau": tau, "m2po_harmful_tokens": n})

    def token_objective(self, x: Inputs, decision: Decision) -> TokenObjective:
        bounds = decision.data
        if not isinstance(bounds, M2poBounds):
            raise ValueError("m2po's loss needs its decision (the bounds): call decide() first")
        t = clipped_objective(x, bounds.c_low, bounds.c_high, None)
        if bounds.tau is None:  # no clip decided: the record holds no bounds
            t.c_low = t.c_high = None
        return t
