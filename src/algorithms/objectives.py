"""`policy_loss`: a method's decision, loss and metrics on one batch, in one call.

For a batch that is a whole mini-batch (tests, benchmarks, one-off use):
`policy_loss(method, logp, logp_behavior, advantages, mask, entropy=..., **params)` builds
the method from `params` (its parameter dataclass's fields, plus `aggregation`,
`norm_length`), decides on the batch, takes the loss and computes the update metrics
(`out.metrics`). Trainers that split a mini-batch into micro-batches use the method's own
`decide` / `loss` and `metrics.update_metrics` instead (see `src.update`).

`loss_denominator=` gives the aggregation's normaliser of a larger batch this one is part
of; a method's own keywords for a decision made elsewhere (top_entropy's `selection_mask`,
bapo's `bounds`) replace its decision.
"""

from __future__ import annotations

import dataclasses

from torch import Tensor

from src.algorithms.methods import METHODS, PolicyLossOutput, build_method, method_class
from src.algorithms.metrics import update_metrics

# Every registered method's parameter defaults, from its dataclass (the one place they live).
METHOD_DEFAULTS: dict[str, dict] = {
    name: dataclasses.asdict(cls.Params()) for name, cls in sorted(METHODS.items())}


def policy_loss(method: str, logp: Tensor, logp_behavior: Tensor, advantages: Tensor,
                mask: Tensor, *, entropy: Tensor | None = None, aggregation: str = "token-mean",
                norm_length: int | None = None, loss_denominator: float | None = None,
                seed: int = 0, **params) -> PolicyLossOutput:
    fields = {f.name for f in dataclasses.fields(method_class(method).Params)}
    given = {k: params.pop(k) for k in list(params) if k not in fields}
    m = build_method(method, params, aggregation=aggregation, norm_length=norm_length)
    if given:
        decision = m.given_decision(**given)
    else:
        inputs = m.decision_inputs(logp, logp_behavior, advantages, mask, entropy, seed)
        decision = m.decide(inputs)
    out = m.loss(logp, logp_behavior, advantages, mask, decision, denominator=loss_denominator)
    out.metrics = update_metrics(out, advantages, mask, logp, entropy)
    return out
