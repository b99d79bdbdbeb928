"""bapo: adaptive clipping bounds searched per update (arXiv 2510.18927, Algorithm 1).

The decision is the bound search (`src.algorithms.bapo`) on the whole mini-batch's
current ratios; the loss is the clipped surrogate at the bounds it found.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from src.algorithms import bapo as search
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
from src.algorithms.methods._clipped import DUAL_CHECK, DUAL_HELP, clipped_objective
from src.config_fields import one_of, setting
from src.run_vocab import MethodTraits

SECTION = "paper section 5.1"


PAPER = search.BapoGrid()  # the search's defaults, written once in src/algorithms/bapo.py


@dataclass
class BapoParams(MethodParams):
    """The search's grid (`grid`, a `BapoGrid`), and how the method runs it."""

    rho0: float = setting(PAPER.rho0, "target share of the policy-gradient magnitude on A>0 tokens",
                          source=SECTION)
    low_start: float = setting(PAPER.low_start, "c_low at the start of the search (a-)", source=SECTION)
    low_max: float = setting(PAPER.low_max, "largest c_low the search may reach (b-)", source=SECTION)
    high_start: float = setting(PAPER.high_start, "c_high at the start of the search (a+)", source=SECTION)
    high_max: float = setting(PAPER.high_max, "largest c_high the search may reach (b+)", source=SECTION)
    high_step: float = setting(PAPER.high_step, "c_high step (delta1)", source=SECTION)
    low_step: float = setting(PAPER.low_step, "c_low step (delta2)", source=SECTION)
    contribution: str = setting(PAPER.contribution, "gradient: rho is the A>0 share of sum |r A| over "
                                "unclipped tokens; value: literal Eq. 8 (surrogate values)")
    weights: str = setting("uniform", "uniform | rollout_prob: w_t = exp(logp_b), as Eq. 8 prints it",
                           one_of(("uniform", "rollout_prob")))
    order: str = setting(PAPER.order, "paper: Algorithm 1 (c_high first); official: the verl recipe "
                         "(c_low first, to its max, then c_high)")
    search: str = setting("fast", "fast | reference: the literal loop (same result, slower)",
                          one_of(("fast", "reference"), "'fast' or 'reference'"))
    dual_clip_c: float | None = setting(None, DUAL_HELP, DUAL_CHECK)

    @property
    def grid(self) -> search.BapoGrid:
        """The search these parameters describe, made (and so checked) once per values."""
        return self.checked().__dict__["_grid"]

    def validate(self) -> None:
        check_bounds(self.low_start, self.high_start, name="low_start")
        self.__dict__["_grid"] = search.grid_from(self)  # a BapoGrid checks itself when made


@register
class Bapo(Method):
    """Decision: the search's `BoundsResult` (`data`) and its rho/steps (`record`)."""

    name = "bapo"
    Params = BapoParams
    decides = True
    traits = MethodTraits(adaptive_bounds=True, target="rho0", measure="rho",
                          measure_at_start="rho_before", moved="bapo_steps",
                          reached="bapo_reached", undefined="bapo_undefined")

    def __init__(self, params: BapoParams | None = None, **shared) -> None:
        super().__init__(params, **shared)
        self.grid = self.params.grid  # every decision searches this one grid

    def decide(self, inputs: DecisionInputs) -> Decision:
        """Mergeable: the search reads the whole mini-batch's masked tokens at once."""
        p = self.params
        mask = inputs.mask
        ratio = inputs.log_ratio.exp()
        adv = inputs.advantages
        w = search.token_weights(p.weights, ratio, inputs.logp_behavior)
        if p.dual_clip_c is not None and p.contribution == "gradient":
            # Dual-clipped tokens carry no gradient whatever the bounds, so they get weight 0
            # in rho (they stay in the mask: A != 0 but all clipped means rho = 0, not undefined).
            keep = ~((adv < 0) & (ratio > p.dual_clip_c))
            w = keep.to(ratio.dtype) if w is None else torch.where(keep, w, 0.0)
        if p.search == "fast":  # inputs are validated: search the masked tokens directly
            r = ratio[mask].double()
            found = search.search_tokens(r, adv[mask].double(),
                                         torch.ones_like(r) if w is None else w[mask].double(),
                                         self.grid)
        else:
            found = search.adaptive_bounds_reference(ratio, adv, mask, self.grid, weights=w)
        return self._decision(found)

    def given_decision(self, *, bounds: search.BoundsResult | None = None, **rest) -> Decision:
        """`bounds`: a search result found beforehand (e.g. on a whole mini-batch)."""
        if rest or bounds is None:
            return super().given_decision(**rest, **({} if bounds is None else {"bounds": bounds}))
        if not isinstance(bounds, search.BoundsResult):
            raise TypeError(f"bounds must be a BoundsResult or None, got {type(bounds).__name__}")
        check_bounds(bounds.c_low, bounds.c_high)
        return self._decision(bounds)

    @staticmethod
    def _decision(found: search.BoundsResult) -> Decision:
        def finite(x: float) -> float | None:
            return None if math.isnan(x) else x

        return Decision(data=found, record={
            "rho": finite(found.rho), "rho_before": finite(found.rho_start),
            "bapo_steps": found.steps, "bapo_reached": found.reached,
            "bapo_undefined": found.undefined})

    def token_objective(self, x: Inputs, decision: Decision) -> TokenObjective:
        found = decision.data
        if not isinstance(found, search.BoundsResult):
            raise ValueError("bapo's loss needs its decision (the searched bounds): call decide() "
                             "first, or pass bounds=")
        return clipped_objective(x, found.c_low, found.c_high, self.params.dual_clip_c)
