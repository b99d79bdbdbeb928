"""An arm: one rule for one update, applied to the trunk's state and mini-batch.

Four kinds, each written as a string in `microscope.arms`:

- a method: `ppo`, `clip_higher`, `bapo`, ... (any conf/method/ option), with the values the
  trunk's experiment composes for it; the trunk's own method is the trunk's own config;
- fixed bounds: `clip:LOW,HIGH`, ppo's clipped surrogate at [LOW, HIGH];
- no clip: `noclip`, the same surrogate at [0, inf) (a plain importance-weighted gradient);
- a token class: `mask:CLASS`, the trunk's method with its loss on one class of the paper's
  Insight 2 only: p (the probability the ratio is taken against) below (`low_`) or at or
  above (`high_`) the mini-batch's median p, crossed with the sign of A (`_pos`, `_neg`);

- the optimizer's own drift: `zero`, the trunk's method with every advantage set to 0, so
  the step has a zero gradient and moves the weights by the optimizer's momentum (and weight
  decay) alone; every other arm's step carries that drift too, so `arm - zero` reads a
  rule's own effect;

and `nonorm:ARM`, any of them without gradient-norm clipping (its norm is still measured).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from src.algorithms import METHODS, Method
from src.config import Config
from src.config_fields import ConfigError

CLASSES = ("low_pos", "low_neg", "high_pos", "high_neg")
KINDS = ("method", "clip", "noclip", "mask", "zero")


@dataclass(frozen=True)
class Arm:
    spec: str  # as written in microscope.arms
    kind: str  # one of KINDS
    method: Method
    is_trunk_method: bool  # the trunk's own method: its per-rollout decision applies
    token_class: str | None = None  # mask arms: the class the loss keeps
    grad_clip: float | None = None  # None: the run's train.grad_clip

    def batch(self, mb, classes: dict[str, Tensor]):
        """The mini-batch this arm updates on: a copy of the trunk's, with the trunk's
        per-rollout decision only where it is this arm's own, and with the loss on its token
        class only."""
        keep = mb.loss_keep
        if self.token_class is not None:
            cls = classes[self.token_class]
            keep = cls if keep is None else keep & cls
        advantages = torch.zeros_like(mb.advantages) if self.kind == "zero" else mb.advantages
        return dataclasses.replace(mb, loss_keep=keep, advantages=advantages,
                                   decision=mb.decision if self.is_trunk_method else None)


def token_classes(mb) -> dict[str, Tensor]:
    """Insight 2's four classes of the mini-batch's loss tokens [b, T] (bool, on CPU): p =
    exp(logp_old) below or at/above its median over the loss tokens, by the sign of A (tokens
    with A = 0 are in no class)."""
    mask = mb.loss_mask.cpu()
    p = mb.logp_old.detach().cpu().double().exp()
    adv = mb.advantages.detach().cpu()[:, None].expand_as(mask)
    median = p[mask].median() if bool(mask.any()) else torch.tensor(0.0, dtype=p.dtype)
    low, pos, neg = p < median, adv > 0, adv < 0
    return {"low_pos": mask & low & pos, "low_neg": mask & low & neg,
            "high_pos": mask & ~low & pos, "high_neg": mask & ~low & neg}


def build_arms(specs: list[str], trunk: Config, compose: Callable[[str], Config]) -> list[Arm]:
    """The arms of `specs` for a trunk of config `trunk`; `compose(method_option)` composes the
    trunk's experiment with another method. Raises ConfigError naming the bad arm."""
    return [_arm(spec, trunk, compose) for spec in specs]


def _arm(spec: str, trunk: Config, compose: Callable[[str], Config]) -> Arm:
    norm_length = trunk.rollout.max_new_tokens
    if spec.startswith("nonorm:"):
        inner = _arm(spec[len("nonorm:"):], trunk, compose)
        return dataclasses.replace(inner, spec=spec, grad_clip=math.inf)
    if spec.startswith("clip:") or spec == "noclip":
        low, high = (0.0, math.inf) if spec == "noclip" else _bounds(spec)
        params = METHODS["ppo"].Params(c_low=low, c_high=high)
        method = METHODS["ppo"](params, aggregation=trunk.method.aggregation,
                                norm_length=norm_length)
        return Arm(spec, "noclip" if spec == "noclip" else "clip", method, False)
    if spec == "zero":
        return Arm(spec, "zero", trunk.method.build(norm_length=norm_length), True)
    if spec.startswith("mask:"):
        cls = spec[len("mask:"):]
        if cls not in CLASSES:
            raise ConfigError(f"microscope.arms: {spec!r} names no token class; classes: {list(CLASSES)}")
        return Arm(spec, "mask", trunk.method.build(norm_length=norm_length), True, token_class=cls)
    own = spec == trunk.method.name
    cfg = trunk if own else compose(spec)
    method = cfg.method.build(norm_length=norm_length)
    if method.decision_scope == "rollout" and not own:
        raise ConfigError(f"microscope.arms: {spec} decides once per rollout, which one update's "
                          "branch cannot see; branch it as the trunk's method (method="
                          f"{spec}) or with its per-update scope")
    return Arm(spec, "method", method, own)


def _bounds(spec: str) -> tuple[float, float]:
    try:
        low, high = (float(x) for x in spec[len("clip:"):].split(","))
    except ValueError:
        raise ConfigError(f"microscope.arms: {spec!r} is not clip:LOW,HIGH (two numbers; quote "
                          "the arm on the command line: microscope.arms=[ppo,'clip:0.8,1.5'])") from None
    if not 0.0 <= low < 1.0 < high:
        raise ConfigError(f"microscope.arms: {spec!r} needs 0 <= LOW < 1 < HIGH")
    return low, high
