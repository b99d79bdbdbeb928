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
from src.algorithms.methods import (
    METHODS,
    Decision,
    DecisionInputs,
    Method,
    MethodParams,
    PolicyLossOutput,
    build_method,
    method_class,
)
from src.algorithms.metrics import update_metrics
from src.algorithms.objectives import METHOD_DEFAULTS, policy_loss
from src.algorithms.surrogate import AGGREGATIONS, CLIP_STATES, aggregate, clip_states, surrogate

__all__ = [
    "AGGREGATIONS", "CLIP_STATES", "METHODS", "METHOD_DEFAULTS", "BoundsResult", "Decision",
    "DecisionInputs", "GroupAdvantages", "Method", "MethodParams", "PolicyLossOutput",
    "adaptive_bounds", "adaptive_bounds_reference", "aggregate", "build_method", "clip_states",
    "contribution_sums", "group_advantages", "method_class", "policy_loss",
    "positive_contribution", "surrogate", "token_entropy", "top_q_mask", "update_metrics",
]
