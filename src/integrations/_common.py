"""Glue shared by the TRL and verl plugs: method resolution.

No objective math lives here. A method is resolved exactly as the project's own trainer
resolves it: conf/method/<name>.yaml is loaded and checked with `src.config.validate_method`
(the objective's parameter dataclass), so the three trainers build the same method
(`ResolvedMethod.build`) and `policy_loss(objective, ..., **params)` gets the same keywords.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from src.algorithms import METHODS, build_method

METHOD_CONF_DIR = Path(__file__).resolve().parents[2] / "conf" / "method"


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


def available_methods() -> list[str]:
    """Method labels with a yaml in conf/method/ (the project's one place for methods)."""
    return sorted(p.stem for p in METHOD_CONF_DIR.glob("*.yaml"))


# A defaults entry naming an objective's dataclass defaults, as conf/method/<objective>.yaml
# lists it first: `/method_defaults/<objective>@_here_` (src/config.py register_defaults).
_DEFAULTS_ENTRY = re.compile(r"/method_defaults/(?P<objective>\w+)@_here_")


def load_method_yaml(name: str, _seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """conf/method/<name>.yaml with its Hydra `defaults:` merged in: other method files, and
    an objective's dataclass defaults (`/method_defaults/<objective>@_here_`), as Hydra
    composes them for `python -m src.run`."""
    path = METHOD_CONF_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"method {name!r} has no conf/method/{name}.yaml; "
                         f"known methods: {available_methods()}")
    if name in _seen:
        raise ValueError(f"conf/method defaults form a cycle: {' -> '.join((*_seen, name))}")
    raw = yaml.safe_load(path.read_text()) or {}
    defaults = raw.pop("defaults", None) or []
    merged = OmegaConf.create({})
    self_merged = False
    for entry in defaults:
        if entry == "_self_":
            merged, self_merged = OmegaConf.merge(merged, raw), True
        elif isinstance(entry, str) and (node := _DEFAULTS_ENTRY.fullmatch(entry)):
            from src.config import method_defaults  # late: the config imports the registry

            objective = node["objective"]
            if objective not in METHODS:
                raise ValueError(f"conf/method/{name}.yaml: {entry!r} names no objective; "
                                 f"known objectives: {sorted(METHODS)}")
            merged = OmegaConf.merge(merged, method_defaults(objective))
        elif isinstance(entry, str):
            merged = OmegaConf.merge(merged, load_method_yaml(entry, (*_seen, name)))
        else:
            raise ValueError(f"conf/method/{name}.yaml: unsupported defaults entry {entry!r}")
    if not self_merged:
        merged = OmegaConf.merge(merged, raw)
    return OmegaConf.to_container(merged, resolve=True)


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
