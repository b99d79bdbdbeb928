"""m2po: Second-Moment Trust Policy Optimization (Zheng, Zhao and Chen 2025, arXiv 2510.01161).

No clipping. The trust region is the second moment of the log-ratios,
M2 = 1/N sum_t (log r_t)^2: the tokens with the largest (log r_t)^2 are masked, largest
first, until the remaining tokens' M2 is at most tau. Then

    J = 1/N sum_t M_t r_t A_t,   M_t in {0, 1}

a mean over ALL N tokens (masked ones count in N and add 0).

Decision: the masked token set (`tokens`), taken over the whole mini-batch's tokens at
once (largest first, ties by row-major position), with M2 before and after in the record.
Masked tokens are in state `masked` (no gradient), whatever their advantage; the others
keep r_t A_t.
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
    param,
    register,
)
from src.algorithms.surrogate import MASKED, NONE

SOURCE = ("the paper's second-moment threshold tau_M2 = 0.04; AReaL's M2PO example "
          "(examples/math/gsm8k_m2po.yaml, m2_threshold: 0.04) uses the same")


def second_moment_mask(log_ratio: Tensor, mask: Tensor, tau: float) -> Tensor:
    """[B, T] bool: the fewest largest-(log r)^2 tokens whose masking leaves M2 <= tau.

    Masking the largest value never raises the mean of the rest, so the smallest k with
    mean(rest) <= tau is found from the sorted values' cumulative sums in one pass.
    """
    flat_m = mask.reshape(-1)
    candidates = flat_m.nonzero().squeeze(1)
    m2 = log_ratio.detach().reshape(-1)[candidates].double() ** 2
    order = torch.sort(-m2, stable=True).indices  # largest first, ties by position
    n = m2.numel()
    removed = torch.cat([m2.new_zeros(1), m2[order].cumsum(0)])  # removed[k]: sum of top k
    kept = torch.arange(n, 0, -1, device=m2.device, dtype=m2.dtype)  # n - k for k < n
    ok = ((removed[-1] - removed[:-1]) / kept <= tau).nonzero()
    k = int(ok[0]) if ok.numel() else n
    masked = torch.zeros_like(flat_m)
    masked[candidates[order[:k]]] = True
    return masked.view_as(mask)


@dataclass
class M2poParams(MethodParams):
    tau: float = param(0.04, "largest second moment of the log-ratios left after masking", SOURCE)

    def validate(self) -> None:
        if not self.tau > 0.0:
            raise ValueError(f"tau must be > 0, got {self.tau}")


@register
class M2po(Method):
    name = "m2po"
    Params = M2poParams
    decides = True

    def decide(self, inputs: DecisionInputs) -> Decision:
        log_r = inputs.log_ratio
        masked = second_moment_mask(log_r, inputs.mask, self.params.tau)
        sq = log_r.double() ** 2
        kept = inputs.mask & ~masked
        record = {"m2": float(sq[inputs.mask].mean()),
                  "m2_kept": float(sq[kept].mean()) if bool(kept.any()) else None,
                  "m2_masked_tokens": int(masked.sum())}
        return Decision(tokens=masked, record=record)

    def token_objective(self, x: Inputs, decision: Decision) -> TokenObjective:
        if decision.tokens is None:
            raise ValueError("m2po's loss needs its decision (the masked tokens): call decide() first")
        if decision.tokens.shape != x.mask.shape:
            raise ValueError(f"the m2po decision has shape {tuple(decision.tokens.shape)}, "
                             f"expected {tuple(x.mask.shape)}")
        masked = decision.tokens.bool() & x.mask
        state = torch.where(masked, MASKED, NONE).to(torch.int8)
        value = torch.where(masked, torch.zeros_like(x.ratio), x.ratio * x.advantages)
        return TokenObjective(value, state, x.ratio.detach(), x.mask)
