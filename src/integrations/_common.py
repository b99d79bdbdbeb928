"""Glue shared by the TRL and verl plugs: method resolution and record aggregation.

No objective math lives here. A method is resolved exactly as the project's own trainer
resolves it (conf/method/<name>.yaml -> `src.config.MethodConfig` -> validated ->
`src.trainer.method_params`), so `policy_loss(objective, ..., **params)` gets the same
keyword arguments in all three trainers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

METHOD_CONF_DIR = Path(__file__).resolve().parents[2] / "conf" / "method"

# Counts and sums add up over micro-batches and ranks; shares are recomputed from them.
SUM_KEYS = ("tokens_in_loss", "tokens_pos", "tokens_neg", "tokens_zero", "contrib_grad_pos",
            "contrib_grad_neg", "contrib_value_pos", "contrib_value_neg", "tokens_total")
# Fractions are token-weighted means; the weight is the count they are a fraction of.
WEIGHTED_KEYS = {"clip_frac": "tokens_in_loss", "clip_low_frac": "tokens_in_loss",
                 "clip_high_frac": "tokens_in_loss", "dual_clip_frac": "tokens_in_loss",
                 "clip_frac_pos": "tokens_pos", "clip_frac_neg": "tokens_neg",
                 "ratio_mean": "tokens_total", "abs_log_ratio_mean": "tokens_total",
                 "kl_k3": "tokens_total", "entropy_mean": "tokens_total"}


@dataclass(frozen=True)
class ResolvedMethod:
    name: str  # label (run dirs, figures): ppo, bapo_official, clip_0.8_1.5, ...
    objective: str  # registry key in src.algorithms.METHODS
    params: dict[str, Any]  # keyword arguments for src.algorithms.policy_loss
    config: dict[str, Any] = field(default_factory=dict)  # the `method:` section, resolved


def available_methods() -> list[str]:
    """Method labels with a yaml in conf/method/ (the project's one place for methods)."""
    return sorted(p.stem for p in METHOD_CONF_DIR.glob("*.yaml"))


def load_method_yaml(name: str, _seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """conf/method/<name>.yaml with its Hydra `defaults:` (other method files) merged in."""
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
        elif isinstance(entry, str):
            merged = OmegaConf.merge(merged, load_method_yaml(entry, (*_seen, name)))
        else:
            raise ValueError(f"conf/method/{name}.yaml: unsupported defaults entry {entry!r}")
    if not self_merged:
        merged = OmegaConf.merge(merged, raw)
    return OmegaConf.to_container(merged, resolve=True)


def resolve_method(method: str | Mapping[str, Any], overrides: Mapping[str, Any] | None = None,
                   *, norm_length: int | None = None) -> ResolvedMethod:
    """Validated method -> `policy_loss` kwargs, with the project trainer's own code.

    `method` is a label with a conf/method yaml (`"bapo"`, `"bapo_official"`, ...) or a
    mapping in the same format; `overrides` is merged on top (e.g. `{"bapo": {"rho0": 0.45}}`).
    `norm_length` is the Dr. GRPO constant (max response length) for seq-mean-token-sum-norm.
    Errors are `src.config.ConfigError` naming the key, as in the project's trainer.
    """
    from src.config import Config, ConfigError, MethodConfig, _check_method
    from src.trainer import method_params

    if isinstance(method, str):
        base = load_method_yaml(method)
    elif isinstance(method, Mapping):
        base = OmegaConf.to_container(OmegaConf.create(dict(method)), resolve=True)
        label = base.get("name") if isinstance(base, dict) else None
        if isinstance(label, str) and "objective" not in base and (METHOD_CONF_DIR / f"{label}.yaml").is_file():
            base = OmegaConf.to_container(OmegaConf.merge(load_method_yaml(label), base))
    else:
        raise TypeError(f"method must be a name or a mapping, got {type(method).__name__}")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(MethodConfig), base, dict(overrides or {}))
        method_cfg: MethodConfig = OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "?"
        raise ConfigError(f"method.{key}: {str(e).splitlines()[0]}") from None
    _check_method(method_cfg)
    if method_cfg.objective == "top_entropy" and method_cfg.entropy_scope != "minibatch":
        raise ConfigError(
            "method.entropy_scope=rollout is not available in the TRL/verl plugs: neither engine "
            "computes behaviour-policy entropies at rollout time. Use entropy_scope=minibatch "
            "(the scope TRL and the official code use) or the project's own trainer.")
    cfg = Config(method=method_cfg)
    if norm_length is not None:
        cfg.rollout.max_new_tokens = int(norm_length)
    params = method_params(cfg)
    config = OmegaConf.to_container(OmegaConf.structured(method_cfg), resolve=True)
    return ResolvedMethod(method_cfg.name, method_cfg.objective, params, config)


def json_value(v: Any) -> Any:
    """Python scalar for JSON/loggers: tensors and numpy scalars unwrapped, NaN -> None."""
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _mean(values: list) -> float | None:
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return sum(vals) / len(vals) if vals else None


def _share(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or a + b <= 0:
        return None
    return a / (a + b)


def combine_records(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One update record from the per-micro-batch (and per-rank) metric dicts of an update.

    Counts and contribution sums add up; clip fractions are token-weighted; shares are
    recomputed from the sums; the bounds and rho are averaged (they are equal across
    micro-batches when the search ran on the whole update, which is the case the docs
    recommend). `bapo_reached` holds only if it held everywhere; `bapo_undefined` if anywhere.
    """
    records = [r for r in records if r]
    if not records:
        return {}
    good = [r for r in records if not r.get("skipped")]
    use = good or records
    out: dict[str, Any] = {}
    for key in SUM_KEYS:
        vals = [r[key] for r in use if r.get(key) is not None]
        out[key] = sum(vals) if vals else None
    for key, weight_key in WEIGHTED_KEYS.items():
        pairs = [(r[key], r.get(weight_key) or 0) for r in use if r.get(key) is not None]
        total = sum(w for _, w in pairs)
        out[key] = (sum(v * w for v, w in pairs) / total if total > 0
                    else _mean([v for v, _ in pairs]))
    out["token_share_pos"] = _share(out["tokens_pos"], out["tokens_neg"])
    out["token_share_neg"] = _share(out["tokens_neg"], out["tokens_pos"])
    out["contrib_grad_pos_share"] = _share(out["contrib_grad_pos"], out["contrib_grad_neg"])
    out["contrib_value_pos_share"] = _share(out["contrib_value_pos"], out["contrib_value_neg"])
    for key in ("c_low", "c_high", "rho", "rho_before", "bapo_steps", "entropy_clip_cov", "loss"):
        out[key] = _mean([r.get(key) for r in use])
    reached = [r.get("bapo_reached") for r in use if r.get("bapo_reached") is not None]
    out["bapo_reached"] = all(reached) if reached else None
    undefined = [r.get("bapo_undefined") for r in use if r.get("bapo_undefined") is not None]
    out["bapo_undefined"] = any(undefined) if undefined else None
    out["skipped"] = not good
    reasons = [r.get("skip_reason") for r in records if r.get("skip_reason")]
    out["skip_reason"] = reasons[0] if reasons and not good else None
    out["micro_batches"] = len(records)
    out["micro_batches_skipped"] = len(records) - len(good)
    return out
