"""verl plug: the project's objectives as entries of verl's policy-loss registry.

Importing this module (in every verl process: use `actor_rollout_ref.model.external_lib=
src.integrations.verl_losses`, see docs/integrations.md) registers one verl policy loss per
method yaml in conf/method/ (`ppo`, `clip_higher`, `top_entropy`, `bapo`, `bapo_official`,
`clip_0.8_1.5`, `gspo`, `cispo`, `m2po`, `clip_cov`, `kl_cov`, ...), each also under a `repro_`
prefix. Select one with `actor_rollout_ref.actor.policy_loss.loss_mode=bapo`. Every entry
builds the method from `src.algorithms` and calls its `decide` and `loss` on the
micro-batch verl passes (a whole-batch decision is then per micro-batch: use one
micro-batch per mini-batch for BAPO's per-update search); no objective math lives here.

verl's signature (checked against verl 0.9.1, `verl/trainer/ppo/core_algos.py`):

    fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
       config: ActorConfig | None = None, rollout_is_weights=None)
       -> (pg_loss, metrics: dict[str, float])                       verl >= 0.6
       -> (pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)           older verl

The return form is picked from the installed verl (`RETURNS`).

Entropies: the signature carries none, so a method that reads them (`top_entropy`) cannot
be a plain registry entry.
`install_entropy_passthrough()` (run at import when verl is present) wraps verl's engine
loss function (`verl.workers.utils.losses.ppo_loss`, which *does* receive the model's
entropies when `actor.calculate_entropy=True`) so it puts the micro-batch's entropies in a
context variable for the duration of the call; the registered losses read them from there.
Without the wrapper or without `calculate_entropy=True`, such a method fails with a message
saying which of the two is missing; the other methods only lose their entropy metrics.

Randomness (clip_cov's draw): seeded by a checksum of the micro-batch's behaviour
log-probs, so a rerun on the same data draws the same tokens.

Method parameters: the method yaml gives the defaults (so verl's `clip_ratio_low/high/c`
are NOT used by these losses); override them with `ProjectPolicyLossConfig` (below) as
`actor_rollout_ref.actor.policy_loss._target_=src.integrations.verl_losses.ProjectPolicyLossConfig`
and `+actor_rollout_ref.actor.policy_loss.method.bapo.rho0=0.45` (the method's parameters
are `method.<objective>.<param>`, as in conf/method). The aggregation is
verl's `actor.loss_agg_mode` (token-mean, seq-mean-token-mean, seq-mean-token-sum-norm).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import json
import warnings
import zlib
from collections.abc import Callable, Mapping
from dataclasses import field
from typing import Any

import torch
from torch import Tensor

from src.algorithms import AGGREGATIONS, update_metrics
from src.integrations._common import ResolvedMethod, available_methods, json_value, resolve_method
from src.update import policy_step

PREFIX = "repro_"
_ENTROPY: contextvars.ContextVar[Tensor | None] = contextvars.ContextVar(
    "bapo_repro_verl_entropy", default=None)
_RESOLVED: dict[tuple[str, str], ResolvedMethod] = {}

try:  # verl is optional: the adapter works (and is tested) without it
    from verl.trainer.ppo import core_algos as _core_algos
except ImportError:  # pragma: no cover - depends on the environment
    _core_algos = None


def _returns_of_installed_verl() -> str:
    """'dict' (verl >= 0.6: (loss, metrics)) or 'tuple4' (older: 4 tensors)."""
    if _core_algos is None:
        return "dict"
    vanilla = getattr(_core_algos, "compute_policy_loss_vanilla", None)
    text = str(inspect.signature(vanilla).return_annotation) if vanilla else ""
    return "tuple4" if ("dict" not in text and text.count("Tensor") >= 4) else "dict"


RETURNS = _returns_of_installed_verl()


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _method_for(name: str, config: Any) -> ResolvedMethod:
    overrides = _get(_get(config, "policy_loss"), "method") or {}
    if hasattr(overrides, "items") and not isinstance(overrides, dict):
        from omegaconf import OmegaConf
        overrides = OmegaConf.to_container(overrides, resolve=True)
    key = (name, json.dumps(overrides, sort_keys=True, default=str))
    if key not in _RESOLVED:
        _RESOLVED[key] = resolve_method(name, overrides)
    return _RESOLVED[key]


def _verl_scale(loss: Tensor, response_mask: Tensor, mode: str, config: Any) -> Tensor:
    """The objective's micro-batch loss, weighted like verl's `agg_loss` weights micro-batches.

    verl normalises each micro-batch's loss by global counts (`config.global_batch_info`:
    dp_size, batch_num_tokens, global_batch_size) so that the sum over micro-batches and
    the mean over data-parallel ranks is the loss of the whole mini-batch. The objective
    returns a mean over its own micro-batch; it is weighted here by the micro-batch's
    share of the mini-batch's response tokens (token-mean) or sequences (seq modes). For
    ppo / clip_higher / bapo this is exactly verl's own aggregation.
    """
    info = _get(config, "global_batch_info") or {}
    dp = int(info.get("dp_size") or 1)
    if mode == "token-mean":
        total = info.get("batch_num_tokens")
        if total is None:
            if dp > 1:
                raise ValueError("global_batch_info.batch_num_tokens is required when dp_size > 1")
            return loss
        return loss * response_mask.sum() * dp / total
    total = info.get("global_batch_size")
    if total is None:
        if dp > 1:
            raise ValueError("global_batch_info.global_batch_size is required when dp_size > 1")
        return loss
    if mode == "seq-mean-token-mean":
        local = (response_mask.sum(dim=-1) > 0).sum()
    else:  # seq-mean-token-sum-norm: the objective divides by all rows of the micro-batch
        local = response_mask.shape[0]
    return loss * local * dp / total


def _result(loss: Tensor, metrics: dict[str, float], returns: str):
    if returns == "dict":
        return loss, metrics
    as_t = lambda k: torch.tensor(metrics.get(k, 0.0), device=loss.device)  # noqa: E731
    return loss, as_t("actor/pg_clipfrac"), as_t("actor/ppo_kl"), as_t("actor/pg_clipfrac_lower")


def make_policy_loss(name: str, *, returns: str | None = None) -> Callable:
    """A verl policy-loss function for the method `name` (a conf/method label)."""
    resolve_method(name)  # fail now for an unknown or invalid method
    returns = returns or RETURNS
    if returns not in ("dict", "tuple4"):
        raise ValueError(f"returns must be 'dict' or 'tuple4', got {returns!r}")

    def loss_fn(old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor,
                response_mask: Tensor, loss_agg_mode: str = "token-mean", config: Any = None,
                rollout_is_weights: Tensor | None = None, **_ignored):
        method = _method_for(name, config)
        _refuse_call(name, rollout_is_weights, loss_agg_mode)
        entropy = _ENTROPY.get()
        if entropy is not None and entropy.shape != log_prob.shape:
            entropy = None  # e.g. another loss wrapper changed the layout; do not guess
        scale = _get(config, "loss_scale_factor")
        objective = method.build(aggregation=loss_agg_mode,
                                 norm_length=int(scale) if scale else int(log_prob.shape[-1]))
        if objective.needs_entropy and entropy is None:
            raise ValueError(
                f"policy loss {name!r} needs per-token entropies, which verl's policy-loss signature "
                "does not carry. Set actor_rollout_ref.actor.calculate_entropy=True and load "
                "src.integrations.verl_losses in the workers (actor_rollout_ref.model.external_lib="
                "src.integrations.verl_losses), which installs the entropy pass-through.")
        mask = response_mask.bool()
        # the trainer's own policy_step (src/update.py): decide, loss, the same skip reasons;
        # the seed of a random decision is the micro-batch's own, so every rank agrees on it
        seed = (zlib.crc32(old_log_prob.detach().float().cpu().numpy().tobytes())
                if objective.decides and bool(mask.any()) else 0)
        step = policy_step(objective, log_prob, old_log_prob, advantages, mask, entropy, seed=seed)
        if step.skip_reason is not None:
            # Zero loss that keeps the graph (FSDP needs every rank to backward).
            return _result(log_prob.sum() * 0.0, {"actor/repro/skipped": 1.0}, returns)
        loss = _verl_scale(step.out.loss, mask, loss_agg_mode, config)
        metrics = _verl_metrics(update_metrics(step.out, advantages, mask, log_prob, entropy))
        return _result(loss, metrics, returns)

    loss_fn.__name__ = f"repro_policy_loss_{name}"
    loss_fn.__qualname__ = loss_fn.__name__
    loss_fn.__doc__ = f"verl policy loss: the project's {name!r} method (src.algorithms.methods)."
    return loss_fn


def _refuse_call(name: str, rollout_is_weights: Tensor | None, loss_agg_mode: str) -> None:
    """What verl may pass that the project's objectives cannot take: an error naming the fix."""
    if rollout_is_weights is not None:
        raise ValueError(
            f"policy loss {name!r}: verl passed rollout_is_weights (algorithm.rollout_correction "
            "is on). The project's objectives have no per-token IS weights; set "
            "algorithm.rollout_correction.rollout_is=null (the actor recomputes the behaviour "
            "log-probs, so the ratio is already against the trainer's own weights).")
    if loss_agg_mode not in AGGREGATIONS:
        raise ValueError(f"policy loss {name!r}: actor.loss_agg_mode={loss_agg_mode!r} is not "
                         f"one of the project's aggregations {list(AGGREGATIONS)}")


def _verl_metrics(m: dict[str, Any]) -> dict[str, float]:
    """The update metrics as verl's actor metrics (its three keys, then every number of ours
    under actor/repro/)."""
    metrics = {"actor/pg_clipfrac": float(m.get("clip_frac") or 0.0),
               "actor/ppo_kl": float(m.get("kl_k3") or 0.0),  # k3 estimate of KL(old||new)
               "actor/pg_clipfrac_lower": float(m.get("dual_clip_frac") or 0.0),
               "actor/repro/skipped": 0.0}
    for key, value in m.items():
        value = json_value(value)
        if isinstance(value, bool):
            value = float(value)
        if isinstance(value, int | float):
            metrics[f"actor/repro/{key}"] = float(value)
    return metrics


def register(names: list[str] | None = None, *, register_fn: Callable | None = None,
             registry: Mapping[str, Callable] | None = None) -> list[str]:
    """Register the methods under their own name and under `repro_<name>`; returns the names.

    A name verl already uses for a different loss is left alone (only the prefixed alias is
    registered) and a warning says so. Defaults: verl's `register_policy_loss` and
    `POLICY_LOSS_REGISTRY`.
    """
    if register_fn is None:
        if _core_algos is None:
            raise ImportError("verl is not installed; pass register_fn= to register elsewhere")
        register_fn, registry = _core_algos.register_policy_loss, _core_algos.POLICY_LOSS_REGISTRY
    registry = registry if registry is not None else {}
    done = []
    for name in names or available_methods():
        fn = make_policy_loss(name)
        for key in (name, f"{PREFIX}{name}"):
            current = registry.get(key)
            if current is not None and not getattr(current, "__name__", "").startswith("repro_policy_loss_"):
                warnings.warn(f"verl already has a policy loss {key!r}; the project's {name!r} is "
                              f"registered as {PREFIX}{name} only", stacklevel=2)
                continue
            register_fn(key)(fn)
            done.append(key)
    return done


# -- entropies for top_entropy -----------------------------------------------------------

def entropy_passthrough(loss_fn: Callable) -> Callable:
    """Wrap a verl engine loss `(config, model_output, data, dp_group=None)` so that the
    registered policy losses can read `model_output["entropy"]` (padded to the response
    layout, as `ppo_loss` pads log-probs) during the call."""
    if getattr(loss_fn, "__repro_entropy_passthrough__", False):
        return loss_fn
    sig = inspect.signature(loss_fn)

    @functools.wraps(loss_fn)
    def wrapped(*args, **kwargs):
        bound = sig.bind_partial(*args, **kwargs)
        model_output, data = bound.arguments.get("model_output"), bound.arguments.get("data")
        entropy = None
        if model_output is not None and hasattr(model_output, "get"):
            entropy = model_output.get("entropy", None)
        if entropy is not None and data is not None:
            entropy = _to_padded(entropy, data)
        token = _ENTROPY.set(entropy)
        try:
            return loss_fn(*args, **kwargs)
        finally:
            _ENTROPY.reset(token)

    wrapped.__repro_entropy_passthrough__ = True
    return wrapped


def _to_padded(entropy: Tensor, data: Any) -> Tensor:
    try:
        from verl.workers.utils.padding import no_padding_2_padding
    except ImportError:  # pragma: no cover - older verl passes padded tensors already
        return entropy
    return no_padding_2_padding(entropy, data)


def install_entropy_passthrough() -> bool:
    """Wrap verl's `ppo_loss` where the engine workers look it up. True if installed.

    Must run before the actor worker builds its loss function: importing this module via
    `actor_rollout_ref.model.external_lib` does it (the worker builds the model config, and
    so imports external_lib, before it binds `ppo_loss`).
    """
    import importlib

    done = False
    for module_name in ("verl.workers.utils.losses", "verl.workers.engine_workers"):
        try:
            module = importlib.import_module(module_name)
        except Exception:  # noqa: BLE001 - GPU-only imports may fail on CPU; skip that module
            continue
        if hasattr(module, "ppo_loss"):
            module.ppo_loss = entropy_passthrough(module.ppo_loss)
            done = True
    return done


@contextlib.contextmanager
def entropy_context(entropy: Tensor | None):
    """Make `entropy` ([B, T], the response layout) visible to the registered losses."""
    token = _ENTROPY.set(entropy)
    try:
        yield
    finally:
        _ENTROPY.reset(token)


if _core_algos is not None:
    from dataclasses import dataclass

    from verl.workers.config import PolicyLossConfig

    @dataclass
    class ProjectPolicyLossConfig(PolicyLossConfig):
        """verl's PolicyLossConfig plus `method`: overrides in conf/method format."""

        method: dict = field(default_factory=dict)

    REGISTERED = register()
    ENTROPY_PASSTHROUGH = install_entropy_passthrough()
else:  # pragma: no cover - depends on the environment
    REGISTERED, ENTROPY_PASSTHROUGH = [], False
