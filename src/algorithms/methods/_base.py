"""What every method is made of: its parameters, its decision, its loss.

A method is one class in one module of this package (registered with `@register`):

- `Params`: a dataclass whose fields are `setting(default, help, check, source=...)`
  (src/config_fields.py, as the config's fields): the default, its help text, the
  parameter's own check and where the default comes from. `validate()` holds only the
  checks that read several parameters. Every failure is a ValueError whose message starts
  with the parameter's name. The config (`method.<objective>.<param>`), the plugs and
  `policy_loss()` all validate through `checked()`.
- `decide(inputs)`: what the method settles for a whole mini-batch before its loss is
  taken (BAPO's bounds, a token set), from detached per-token tensors of the WHOLE
  mini-batch: all its micro-batches, and all ranks' micro-batches gathered, concatenated
  (padded) along the rows. The caller computes it once per update and hands each
  micro-batch `decision.take(rows, length)`, so the decision, and with it the gradient, is
  the same however the mini-batch is split.
- `token_objective(...)`: J_t per token (carrying the graph through `logp`) with its clip
  states and weights; the shared `loss()` validates the inputs and aggregates J_t.
- nothing about metrics: `src.algorithms.metrics` computes them once per update from the
  `PolicyLossOutput` of the whole mini-batch.
- `traits` (`src.run_vocab.MethodTraits`): what analysis reads of the method (adaptive
  bounds or not, the record keys of its decision); written into each run's config.yaml as
  `method.traits`, so analysis never compares method names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor

from src.algorithms._checks import as_bool_mask, broadcast_advantages, check_finite
from src.algorithms.surrogate import aggregate, check_aggregation, loss_denominator
from src.config_fields import check_fields
from src.run_vocab import MethodTraits


@dataclass
class MethodParams:
    """Base of every method's parameters."""

    def validate(self) -> None:
        """The checks that read several parameters (each parameter's own check is its
        field's); raise ValueError naming the first bad parameter (the message starts with it)."""

    def checked(self) -> MethodParams:
        """These parameters, validated once for their current values: a config's are checked
        when it is read, and the methods built from them afterwards do not check them again
        (a changed value is checked anew)."""
        values = dataclasses.astuple(self)
        if self.__dict__.get("_checked_values") != values:
            check_fields(self, "")  # each parameter's own check (ConfigError is a ValueError)
            self.validate()
            self.__dict__["_checked_values"] = values
        return self

    @classmethod
    def help(cls) -> dict[str, str]:
        """Parameter -> help text, with the source of its default when the field names one."""
        out = {}
        for f in dataclasses.fields(cls):
            text = f.metadata.get("help", "")
            if f.metadata.get("source"):
                text = f"{text} (default from {f.metadata['source']})"
            out[f.name] = text
        return out


@dataclass(frozen=True)
class DecisionInputs:
    """Detached [B, T] tensors of a whole mini-batch for `Method.decide`.

    `logp` and `entropy` are the current policy's; `advantages` is per token (zero on
    padding) and `mask` a bool mask. `seed` is the caller's per-update seed, for methods
    that draw at random (clip_cov), so a run stays deterministic.
    """

    logp: Tensor
    logp_behavior: Tensor
    advantages: Tensor
    mask: Tensor
    entropy: Tensor | None = None
    seed: int = 0

    @property
    def log_ratio(self) -> Tensor:
        return torch.where(self.mask, self.logp - self.logp_behavior, torch.zeros_like(self.logp))


@dataclass(frozen=True)
class Decision:
    """What a method settled for a mini-batch.

    `tokens`: a [B, T] bool token set (its meaning is the method's: top_entropy's kept
    tokens, clip_cov's detached ones, ...); `data`: anything else the loss needs (BAPO's search
    result); `record`: scalars for the update record (BAPO's rho, steps, ...).
    """

    tokens: Tensor | None = None
    data: Any = None
    record: Mapping[str, Any] = field(default_factory=dict)

    def take(self, rows: slice | Tensor, length: int) -> Decision:
        """The part of the decision for rows `rows` of the mini-batch, trimmed to `length`."""
        if self.tokens is None:
            return self
        return dataclasses.replace(self, tokens=self.tokens[rows, :length])


@dataclass
class TokenObjective:
    """Per-token result of a method on one batch (see `Method.token_objective`).

    `value` is J_t with the graph; `weight` (detached) is w_t with dJ_t/dlogp_t = w_t A_t on
    the tokens whose state carries a gradient; `in_loss` the tokens aggregated over.
    `record`: scalars of what the method did on this batch that no clip state or bound
    holds (sapo's mean gate, dcpo's mean bounds), merged into the update record as a
    decision's record is; taken on the whole mini-batch, as the metrics are.
    """

    value: Tensor
    state: Tensor
    weight: Tensor
    in_loss: Tensor
    c_low: float | None = None
    c_high: float | None = None
    record: dict[str, Any] = field(default_factory=dict)


@dataclass
class PolicyLossOutput:
    loss: Tensor  # scalar, differentiable w.r.t. logp
    ratio: Tensor  # [B, T] token ratio r_t, detached
    clip_state: Tensor  # [B, T] int8, see surrogate.CLIP_STATES
    in_loss: Tensor  # [B, T] bool: tokens whose surrogate enters the loss
    c_low: float | None  # the bounds the method used (None: it has none)
    c_high: float | None
    weight: Tensor  # [B, T] detached, dJ_t/dlogp_t = weight_t * A_t where a gradient is kept
    decision: Decision = field(default_factory=Decision)
    metrics: dict[str, Any] = field(default_factory=dict)  # filled by policy_loss() only

    @property
    def bounds(self) -> Any:
        """BAPO's search result behind c_low/c_high (None for other methods)."""
        return self.decision.data


@dataclass(frozen=True)
class Inputs:
    """Validated inputs of one batch: padding zeroed, so no NaN reaches the graph."""

    logp: Tensor  # [B, T], carries the graph
    logp_behavior: Tensor  # [B, T], detached
    advantages: Tensor  # [B, T] in logp's dtype, 0 on padding
    mask: Tensor  # [B, T] bool
    log_ratio: Tensor  # where(mask, logp - logp_b, 0), with the graph
    ratio: Tensor  # exp(log_ratio), with the graph


def check_inputs(logp: Tensor, logp_behavior: Tensor, advantages: Tensor, mask: Tensor) -> Inputs:
    """Shapes and finiteness on the masked tokens; errors name the argument."""
    if logp_behavior.shape != logp.shape:
        raise ValueError(
            f"logp_behavior has shape {tuple(logp_behavior.shape)} but logp has "
            f"{tuple(logp.shape)}; both must be per response token"
        )
    mask = as_bool_mask(mask, logp)
    check_finite("logp", logp, mask)
    check_finite("logp_behavior", logp_behavior, mask)
    advantages = broadcast_advantages(advantages, logp).to(logp.dtype)
    check_finite("advantages", advantages, mask)
    # Padding may hold anything; zero it so no NaN reaches the graph through exp() or A.
    advantages = torch.where(mask, advantages, torch.zeros_like(advantages))
    logp_behavior = logp_behavior.detach()
    log_ratio = torch.where(mask, logp - logp_behavior, torch.zeros_like(logp))
    return Inputs(logp, logp_behavior, advantages, mask, log_ratio, log_ratio.exp())


class Method:
    """A method bound to its parameters and the shared loss settings.

    Subclasses set `name`, `Params`, and implement `token_objective`; those with a
    whole-mini-batch decision set `decides = True` and implement `decide`.
    """

    name: ClassVar[str]
    Params: ClassVar[type[MethodParams]]
    decides: ClassVar[bool] = False  # decide() reads the current policy's numbers
    needs_entropy: ClassVar[bool] = False  # decide() reads the current policy's entropies
    traits: ClassVar[MethodTraits] = MethodTraits()  # what analysis reads of the method

    def __init__(self, params: MethodParams | None = None, *, aggregation: str = "token-mean",
                 norm_length: int | None = None):
        params = self.Params() if params is None else params
        if not isinstance(params, self.Params):
            raise TypeError(f"{self.name} takes {self.Params.__name__}, got {type(params).__name__}")
        params.checked()
        check_aggregation(aggregation)
        self.params, self.aggregation, self.norm_length = params, aggregation, norm_length

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.params}, aggregation={self.aggregation!r})"

    # -- the decision -----------------------------------------------------------------
    @property
    def decision_scope(self) -> str:
        """'update': `decide` runs on each update's mini-batch (current policy); 'rollout':
        once per rollout batch on the behaviour policy's numbers (top_entropy scope=rollout)."""
        return "update"

    def decide(self, inputs: DecisionInputs) -> Decision:
        return Decision()

    def given_decision(self, **given: Any) -> Decision:
        """A decision made elsewhere, in the method's own keywords (policy_loss(**given))."""
        raise ValueError(f"unknown parameter(s) {sorted(given)} for method {self.name!r}; "
                         f"its parameters: {[f.name for f in dataclasses.fields(self.Params)]}")

    def decision_inputs(self, logp: Tensor, logp_behavior: Tensor, advantages: Tensor,
                        mask: Tensor, entropy: Tensor | None = None, seed: int = 0) -> DecisionInputs:
        """Validated, detached decision inputs (entropy checked when the method reads it)."""
        x = check_inputs(logp.detach(), logp_behavior, advantages, mask)
        if self.needs_entropy:
            if entropy is None:
                raise ValueError(f"{self.name} needs entropy= (per-token entropy of the current policy)")
            if entropy.shape != logp.shape:
                raise ValueError(f"entropy has shape {tuple(entropy.shape)}, expected {tuple(logp.shape)}")
            check_finite("entropy", entropy, x.mask)
        entropy = None if entropy is None else entropy.detach()
        return DecisionInputs(x.logp, x.logp_behavior, x.advantages, x.mask, entropy, int(seed))

    # -- the loss -----------------------------------------------------------------------
    def in_loss(self, mask: Tensor, decision: Decision) -> Tensor:
        """The tokens the loss aggregates over (all response tokens unless the method selects)."""
        return mask.bool()

    def denominator(self, mask: Tensor, decision: Decision) -> float:
        """The aggregation's normaliser for this (whole) mini-batch, for its micro-batches."""
        return loss_denominator(self.in_loss(mask, decision), self.aggregation, self.norm_length)

    def token_objective(self, x: Inputs, decision: Decision) -> TokenObjective:
        raise NotImplementedError

    def loss(self, logp: Tensor, logp_behavior: Tensor, advantages: Tensor, mask: Tensor,
             decision: Decision | None = None, *, denominator: float | None = None,
             token_weight: Tensor | None = None) -> PolicyLossOutput:
        """-aggregate(J_t) over the batch; `denominator`: the whole mini-batch's, when this
        batch is one micro-batch of it (`surrogate.loss_denominator`).

        `token_weight` [B, T] (detached): a per-token factor on J_t, applied here for every
        method: the decoupled objective's behaviour weight (src/schedule/anchors.py).
        `logp_behavior` is then the proximal policy's, the one the ratio is clipped against.
        """
        decision = Decision() if decision is None else decision
        x = check_inputs(logp, logp_behavior, advantages, mask)
        t = self.token_objective(x, decision)
        value, weight = t.value, t.weight.detach()
        if token_weight is not None:
            check_finite("token_weight", token_weight, x.mask)
            factor = token_weight.detach().to(value.dtype)
            value, weight = value * factor, weight * factor
        loss = -aggregate(value, t.in_loss, self.aggregation, self.norm_length, denominator=denominator)
        if t.record:  # the method's own numbers of this batch, beside its decision's
            decision = dataclasses.replace(decision, record={**decision.record, **t.record})
        return PolicyLossOutput(loss, x.ratio.detach(), t.state, t.in_loss, t.c_low, t.c_high,
                                weight, decision)


METHODS: dict[str, type[Method]] = {}


def register(cls: type[Method]) -> type[Method]:
    """Class decorator: the method becomes `METHODS[cls.name]` (its `method.objective`)."""
    if cls.name in METHODS and METHODS[cls.name] is not cls:
        raise ValueError(f"two methods named {cls.name!r}: {METHODS[cls.name]} and {cls}")
    if not (isinstance(cls.Params, type) and issubclass(cls.Params, MethodParams)):
        raise TypeError(f"{cls.__name__}.Params must be a MethodParams dataclass")
    METHODS[cls.name] = cls
    return cls


def mean_over(values: Tensor, where: Tensor) -> float | None:
    """The mean of `values` over the tokens `where` (float64), for a method's record; None
    when there are none."""
    n = int(where.sum())
    return float(values.detach()[where].double().sum()) / n if n else None
