"""Pure objective math: tensors in, tensors out. No I/O, no config objects, no globals."""

from src.algorithms.advantages import GroupAdvantages, group_advantages
from src.algorithms.bapo import (
    BoundsResult,
    adaptive_bounds,
    adaptive_bounds_reference,
    contribution_sums,
    positive_contribution,
)
from src.algorithms.entropy import token_entropy, top_q_mask
from src.algorithms.objectives import (
    METHOD_DEFAULTS,
    METHODS,
    PolicyLossOutput,
    policy_loss,
    register_method,
    token_metrics,
)
from src.algorithms.surrogate import AGGREGATIONS, CLIP_STATES, aggregate, clip_states, surrogate

__all__ = [
    "AGGREGATIONS", "CLIP_STATES", "METHODS", "METHOD_DEFAULTS", "BoundsResult", "GroupAdvantages",
    "PolicyLossOutput", "adaptive_bounds", "adaptive_bounds_reference", "aggregate", "clip_states",
    "contribution_sums", "group_advantages", "policy_loss", "positive_contribution",
    "register_method", "surrogate", "token_entropy", "token_metrics", "top_q_mask",
]
