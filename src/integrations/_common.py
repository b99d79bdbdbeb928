"""Glue shared by the TRL and verl plugs: method resolution.

No objective math lives here. A method is resolved exactly as the project's own trainer
resolves it: conf/method/<name>.yaml is loaded and checked with `src.config.validate_method`
(the objective's parameter dataclass), so the three trainers build the same method
(`ResolvedMethod.build`) and `policy_loss(objective, ..., **params)` gets the same keywords.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from omegaconf import OmegaConf

from src.algorithms import build_method
from src.method_yaml import METHOD_CONF_DIR, available_methods, load_method_yaml  # noqa: F401 - the plugs' API


@dataclass(frozen=True)
class ResolvedMethod:
    name: str  # label (run dirs, figures): ppo, bapo_official, clip_0.8_1.5, ...
    objective: str  # registry key in src.algorithms.METHODS
    params: dict[str, Any]  # keyword arguments for src.algorithms.policy_loss
    config: dict[str, Any] = field(default_factory=dict)  # the `method:` section, resolved
    method_config: Any = None  # src.config.MethodConfig
    norm_length: int | None = None

    def build(self, aggregation: str | None = None, norm_length: int | None = None):
        """The method (`src.algorithms.Method`); `aggregation` / `norm_length` as the engine
        sets them (verl passes them per call), else the method's own."""
        m = self.method_config
        return build_method(m.objective, m.params, aggregation=aggregation or m.aggregation,
                            norm_length=self.norm_length if norm_length is None else norm_length)


def resolve_method(method: str | Mapping[str, Any], overrides: Mapping[str, Any] | None = None,
                   *, norm_length: int | None = None) -> ResolvedMethod:
    """Validated method, with the project trainer's own code.

    `method` is a label with a conf/method yaml (`"bapo"`, `"bapo_official"`, ...) or a
    mapping in the same format; `overrides` is merged on top (e.g. `{"bapo": {"rho0": 0.45}}`,
    `{"aggregation": "seq-mean-token-mean"}`). `norm_length` is the Dr. GRPO constant (max
    response length) for seq-mean-token-sum-norm. Errors are `src.config.ConfigError`
    naming the key, as in the project's trainer.
    """
    from src.config import ConfigError, validate_method

    if isinstance(method, str):
        base = load_method_yaml(method)
    elif isinstance(method, Mapping):
        base = OmegaConf.to_container(OmegaConf.create(dict(method)), resolve=True)
        label = base.get("name") if isinstance(base, dict) else None
        if isinstance(label, str) and "objective" not in base and (METHOD_CONF_DIR / f"{label}.yaml").is_file():
            base = OmegaConf.to_container(OmegaConf.merge(load_method_yaml(label), base))
    else:
        raise TypeError(f"method must be a name or a mapping, got {type(method).__name__}")
    merged = OmegaConf.to_container(OmegaConf.merge(base, dict(overrides or {})), resolve=True)
    method_cfg = validate_method(merged)
    if method_cfg.build().decision_scope != "update":
        raise ConfigError(
            f"method.{method_cfg.objective}: this setting decides once per rollout batch from the "
            "behaviour policy's numbers (e.g. top_entropy scope=rollout), which the TRL/verl plugs "
            "do not compute at rollout time; use the per-update setting (scope=minibatch, the one "
            "TRL and the official code use) or the project's own trainer.")
    norm = None if norm_length is None else int(norm_length)
    return ResolvedMethod(method_cfg.name, method_cfg.objective, method_cfg.kwargs(norm),
                          method_cfg.to_container(), method_cfg, norm)


def json_value(v: Any) -> Any:
    """Python scalar for JSON/loggers: tensors and numpy scalars unwrapped, NaN -> None."""
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v
