"""top_entropy: DAPO's clip plus the loss on the top-q entropy tokens only.

Wang et al. 2025, "Beyond the 80/20 Rule" (arXiv 2506.01939): keep the top 20% of the
mini-batch's response tokens by the current policy's entropy; the loss is the token mean
over the kept tokens. Tokens left out have `in_loss` False; their clip state is still the
surrogate's (so the token files show what the clip would have done).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from src.algorithms.entropy import top_q_mask
from src.algorithms.methods._base import (
    Decision,
    DecisionInputs,
    Inputs,
    Method,
    TokenObjective,
    register,
)
from src.algorithms.methods._clipped import ClipParams, clipped_objective
from src.config_fields import in_half_open_unit, one_of, setting

SCOPES = ("minibatch", "rollout")


@dataclass
class TopEntropyParams(ClipParams):
    c_high: float = setting(1.28, "upper ratio bound: A>0 tokens with r > c_high get no gradient",
                            source="the paper's recipe is DAPO's, eps_high = 0.28")
    q: float = setting(0.2, "share of the mini-batch's response tokens kept, by entropy",
                       in_half_open_unit(), source="Wang et al. 2025, the top 20% 'forking' tokens")
    scope: str = setting("minibatch", "minibatch: the top q of each update's mini-batch (current "
                         "policy); rollout: one threshold per rollout batch from the behaviour "
                         "policy's entropies (the paper's batch-level threshold)", one_of(SCOPES))


@register
class TopEntropy(Method):
    """Decision: the top ceil(q N) of the N response tokens by entropy (`tokens` = kept)."""

    name = "top_entropy"
    Params = TopEntropyParams
    decides = True
    needs_entropy = True

    @property
    def decision_scope(self) -> str:
        return "rollout" if self.params.scope == "rollout" else "update"

    def decide(self, inputs: DecisionInputs) -> Decision:
        """Mergeable: ties break by row-major position of the whole (concatenated) batch."""
        if inputs.entropy is None:
            raise ValueError("top_entropy needs entropy= (per-token entropy of the current policy)")
        return Decision(tokens=top_q_mask(inputs.entropy, inputs.mask, self.params.q))

    def given_decision(self, *, selection_mask: Tensor | None = None, **rest) -> Decision:
        """`selection_mask`: a kept-token mask computed elsewhere (e.g. scope=rollout)."""
        if rest:
            return super().given_decision(**rest)
        if selection_mask is None:
            return super().given_decision(selection_mask=None)
        return Decision(tokens=selection_mask.bool())

    def in_loss(self, mask: Tensor, decision: Decision) -> Tensor:
        return mask.bool() & self._kept(mask, decision)

    def token_objective(self, x: Inputs, decision: Decision) -> TokenObjective:
        p = self.params
        return clipped_objective(x, p.c_low, p.c_high, p.dual_clip_c,
                                 in_loss=x.mask & self._kept(x.mask, decision))

    def _kept(self, mask: Tensor, decision: Decision) -> Tensor:
        if decision.tokens is None:
            raise ValueError("top_entropy's loss needs its decision (the kept tokens): "
                             "call decide() first, or pass selection_mask=")
        if decision.tokens.shape != mask.shape:
            raise ValueError(f"selection_mask has shape {tuple(decision.tokens.shape)}, "
                             f"expected {tuple(mask.shape)}")
        return decision.tokens.bool()
