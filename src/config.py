"""Typed config schema and validation, run before any work starts.

Hydra composes `conf/`; `validate()` merges the result onto these dataclasses (so types
are checked by OmegaConf) and then checks the values. Every failure is a `ConfigError`
whose message starts with the dotted key, e.g. `train.staleness must be >= 1, got 0`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from src.algorithms import AGGREGATIONS, METHODS, Method, build_method
from src.run_vocab import SHARED_METHOD_KEYS
from src.schedule.anchors import ANCHORS
from src.schedule.sources import SOURCES
from src.schedule.split import STALENESS_MODES, minibatch_size

OPTIMIZERS = ("adamw", "sgd")


class ConfigError(ValueError):
    """A bad config value; the message names its key and how to fix it."""


@dataclass
class MethodConfig:
    """What every method shares; its own parameters are `method.<objective>` in the yaml.

    `params` holds the objective's parameter dataclass (src/algorithms/methods/<objective>.py,
    where their defaults and help live), validated by it.
    """

    name: str = "ppo"  # label used in run dirs and figures
    objective: str = "ppo"  # registry key in src.algorithms.METHODS
    aggregation: str = "token-mean"  # token-mean | seq-mean-token-mean | seq-mean-token-sum-norm
    params: Any = None  # the objective's parameters (method.<objective> in the yaml)

    def __post_init__(self) -> None:
        if self.params is None and self.objective in METHODS:
            self.params = METHODS[self.objective].Params()

    def build(self, norm_length: int | None = None) -> Method:
        """The method, bound to these parameters and the shared loss settings.

        `norm_length`: the Dr. GRPO constant of seq-mean-token-sum-norm (max response length).
        """
        return build_method(self.objective, self.params, aggregation=self.aggregation,
                            norm_length=norm_length)

    def kwargs(self, norm_length: int | None = None) -> dict[str, Any]:
        """Keyword arguments for `src.algorithms.policy_loss(self.objective, ...)`."""
        return {**dataclasses.asdict(self.params), "aggregation": self.aggregation,
                "norm_length": norm_length}

    def to_container(self) -> dict[str, Any]:
        """The `method:` section as written in config.yaml: shared keys, method.<objective>,
        then the method's traits (for analysis; derived, so never read back)."""
        out = {k: getattr(self, k) for k in SHARED_METHOD_KEYS}
        out[self.objective] = dataclasses.asdict(self.params)
        out["traits"] = METHODS[self.objective].traits.to_config()
        return out


@dataclass
class ExperimentConfig:
    name: str = "staleness_1x"
    description: str = ""


@dataclass
class ModelConfig:
    name: str = "tiny"
    kind: str = "tiny"  # tiny (built and warm-started here) | hf (any HF causal LM)
    path: str | None = None  # hf: hub name or local path
    dtype: str = "float32"
    autocast: str | None = None  # bfloat16: bf16 matmuls, weights stay in `dtype` (precision.py)
    gradient_checkpointing: bool = False
    trust_remote_code: bool = False
    chat_template: bool = True  # hf: apply the tokenizer's chat template when it has one
    architecture: dict[str, Any] = field(default_factory=dict)  # tiny: overrides of the defaults
    sft: dict[str, Any] = field(default_factory=dict)  # tiny: warm-start SFT overrides
    warm_start_seed: int = 0  # one base model shared by every RL seed, as in the paper


@dataclass
class TaskConfig:
    name: str = "arithmetic"
    params: dict[str, Any] = field(default_factory=dict)
    eval_problems: int = 64
    reward: str = "verifier"  # verifier | random (Bernoulli(reward_p), a control; see src/tasks/rewards.py)
    reward_p: float = 0.5


@dataclass
class RolloutConfig:
    backend: str = "hf"  # hf | vllm
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    params: dict[str, Any] = field(default_factory=dict)  # backend-specific


@dataclass
class LoggerConfig:
    backend: str = "local"  # local | wandb
    project: str = "bapo-repro"
    mode: str | None = None  # wandb mode; None -> $WANDB_MODE or offline
    token_fraction: float = 1.0  # share of responses whose tokens are logged
    progress: bool = True
    # Rescore each update's mini-batch right after its optimizer step (one no-grad forward)
    # and log the entropy change that the step caused on its own tokens, beside the Eq. 6
    # covariance that predicts it (`entropy_after`, `entropy_change`).
    entropy_change: bool = False


@dataclass
class TrainConfig:
    steps: int = 30
    prompts_per_step: int = 16
    group_size: int = 8
    staleness: int = 1
    # How k = staleness updates are made from one rollout (see STALENESS_MODES):
    # minibatch: one rollout of P*G responses split into k mini-batches of P*G/k;
    # fixed_update: a rollout of k*P*G responses split into k mini-batches of P*G, so every
    # update sees as many responses as a 1x update and only the data's age changes;
    # epochs: k full-batch updates on one rollout of P*G (Algorithm 1's inner loop).
    staleness_mode: str = "minibatch"
    epochs: int = 1
    # Responses per forward/backward pass; each update accumulates gradients over
    # micro-batches of this size, exactly as one pass over its mini-batch would.
    # None: the whole mini-batch in one pass.
    micro_batch_size: int | None = None
    # adamw (default) | sgd: plain SGD with heavy-ball momentum betas[0], which moves each
    # weight in proportion to its gradient instead of Adam's per-weight normalised step.
    optimizer: str = "adamw"
    lr: float = 1e-4
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    warmup_steps: int = 0
    grad_clip: float = 1.0
    advantage_std_norm: bool = True
    max_bad_updates: int = 5
    threads: int = 2


# Keys that belong to one source only; set under another they are a config error.
SOURCE_KEYS = {"delay": ("delay",), "replay": ("replay_capacity", "replay_draws"),
               "partial": ("token_budget", "mask_stale_prefix")}
REPLAY_DEFAULTS = {"replay_capacity": 4, "replay_draws": 1}


@dataclass
class OffPolicyConfig:
    """Where each step's training data comes from, and which policy the ratio is taken
    against (src/schedule/). The default, fresh + coupled, is the paper's staleness."""

    # fresh: train on the rollout generated this step | delay: on the one generated
    # `delay` steps ago (M2PO's queue) | replay: on the fresh one plus `replay_draws`
    # drawn from a buffer of the last `replay_capacity` rollouts
    source: str = "fresh"
    # coupled: r = pi/pi_behaviour | recompute: r = pi/pi_step_start | decoupled (AReaL):
    # clip pi/pi_step_start, times the behaviour weight min(pi_step_start/pi_behaviour, cap)
    anchor: str = "coupled"
    weight_cap: float = 2.0  # decoupled: truncation of the behaviour weight (verl's default)
    delay: int | None = None  # delay: K steps between generating a rollout and training on it
    replay_capacity: int | None = None  # replay: rollouts kept (default 4)
    replay_draws: int | None = None  # replay: rollouts drawn per step (default 1)
    token_budget: int | None = None  # partial: new tokens a response may get per step
    mask_stale_prefix: bool | None = None  # partial: keep older segments out of the loss (default false)


@dataclass
class EvalConfig:
    every: int = 10
    greedy: bool = True
    sampled: bool = True
    samples: int = 4  # sampled responses per held-out problem


@dataclass
class CheckpointConfig:
    every: int = 10
    keep: int = 2  # newest checkpoints kept while the run goes on
    # A finished run needs no checkpoint to be skipped, analysed or verified; true keeps
    # its last one (to continue training from it), false deletes them all.
    keep_final: bool = True


@dataclass
class Config:
    seed: int = 0
    device: str = "cpu"
    resume: str = "auto"  # auto | true | false
    overwrite: bool = False
    cache_dir: str = ".cache"
    method: MethodConfig = field(default_factory=MethodConfig)
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    offpolicy: OffPolicyConfig = field(default_factory=OffPolicyConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)


def _require(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"{key} {message}")


def _split_method(raw: dict) -> tuple[dict, Any]:
    """`raw` without the method's own section, and the objective's parameters, validated.

    The `method:` node holds the shared keys (MethodConfig) and one section named after
    the objective; that section is checked against the objective's parameter dataclass, so
    every error names its full key (`method.bapo.rho0 must be in (0, 1), got 1.5`).
    """
    method = dict(raw.get("method") or {})
    objective = method.get("objective", MethodConfig.objective)
    _require(objective in METHODS, "method.objective",
             f"must be one of {sorted(METHODS)}, got {objective!r}")
    params_cls = METHODS[objective].Params
    section = None
    method.pop("traits", None)  # written with the config for analysis, derived from the objective
    for key in [k for k in method if k not in SHARED_METHOD_KEYS]:
        value = method.pop(key)
        if key == objective:
            section = value
        elif key in METHODS:
            raise ConfigError(f"method.{key}: parameters of objective {key}, but method.objective "
                              f"is {objective}; set method.objective={key} or drop method.{key}")
        elif key in {f.name for f in dataclasses.fields(params_cls)}:
            raise ConfigError(f"method.{key}: the method's parameters live under "
                              f"method.{objective}; use method.{objective}.{key}")
        else:
            raise ConfigError(f"method.{key}: no such key; method takes {list(SHARED_METHOD_KEYS)} "
                              f"and method.{objective}.<parameter>")
    if section is not None and not isinstance(section, dict):
        raise ConfigError(f"method.{objective} must be a mapping of the method's parameters, "
                          f"got {section!r}")
    try:
        params = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(params_cls), section or {}))
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "?"
        raise ConfigError(f"method.{objective}.{key}: {str(e).splitlines()[0]}") from None
    try:
        params.validate()
    except ValueError as e:
        raise ConfigError(f"method.{objective}.{e}") from None
    return {**raw, "method": method}, params


def _check_method(m: MethodConfig) -> None:
    _require(m.aggregation in AGGREGATIONS, "method.aggregation",
             f"must be one of {list(AGGREGATIONS)}, got {m.aggregation!r}")


def validate_method(method: dict) -> MethodConfig:
    """A `method:` section alone (the plugs' entry): typed and checked as `validate` does."""
    plain, params = _split_method({"method": dict(method)})
    try:
        m: MethodConfig = OmegaConf.to_object(
            OmegaConf.merge(OmegaConf.structured(MethodConfig), plain["method"]))
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "?"
        raise ConfigError(f"method.{key}: {str(e).splitlines()[0]}") from None
    m.params = params
    _check_method(m)
    return m


def _check_train(t: TrainConfig) -> None:
    _require(t.steps > 0, "train.steps", f"must be > 0, got {t.steps}")
    _require(t.prompts_per_step > 0, "train.prompts_per_step", f"must be > 0, got {t.prompts_per_step}")
    _require(t.group_size >= 2, "train.group_size",
             f"must be >= 2 (group baselines need two samples), got {t.group_size}")
    _require(t.staleness >= 1, "train.staleness", f"must be >= 1, got {t.staleness}")
    _require(t.epochs >= 1, "train.epochs", f"must be >= 1, got {t.epochs}")
    _require(t.staleness_mode in STALENESS_MODES, "train.staleness_mode",
             f"must be one of {list(STALENESS_MODES)}, got {t.staleness_mode!r}")
    batch = t.prompts_per_step * t.group_size
    if t.staleness_mode == "minibatch":
        _require(batch % t.staleness == 0, "train.staleness",
                 f"={t.staleness} must divide the rollout batch prompts_per_step*group_size={batch}")
    if t.staleness_mode == "epochs":
        _require(t.epochs == 1, "train.epochs",
                 f"must be 1 with train.staleness_mode=epochs (train.staleness={t.staleness} "
                 f"already sets the number of full-batch updates), got {t.epochs}")
    if t.micro_batch_size is not None:
        mini = minibatch_size(t)
        _require(t.micro_batch_size >= 1, "train.micro_batch_size",
                 f"must be >= 1 or null, got {t.micro_batch_size}")
        _require(mini % t.micro_batch_size == 0, "train.micro_batch_size",
                 f"={t.micro_batch_size} must divide the mini-batch size {mini} "
                 f"(staleness_mode={t.staleness_mode})")
    _require(t.optimizer in OPTIMIZERS, "train.optimizer",
             f"must be one of {list(OPTIMIZERS)}, got {t.optimizer!r}")
    _require(math.isfinite(t.lr) and t.lr > 0, "train.lr", f"must be a finite number > 0, got {t.lr}")
    _require(math.isfinite(t.weight_decay) and t.weight_decay >= 0, "train.weight_decay",
             f"must be a finite number >= 0, got {t.weight_decay}")
    _require(t.grad_clip > 0, "train.grad_clip", f"must be > 0, got {t.grad_clip}")
    _require(len(t.betas) == 2 and all(0 <= b < 1 for b in t.betas), "train.betas",
             f"must be two values in [0, 1), got {list(t.betas)}")
    _require(t.warmup_steps >= 0, "train.warmup_steps", f"must be >= 0, got {t.warmup_steps}")
    _require(t.max_bad_updates >= 1, "train.max_bad_updates", f"must be >= 1, got {t.max_bad_updates}")
    _require(t.threads >= 1, "train.threads", f"must be >= 1, got {t.threads}")


def _check_offpolicy(o: OffPolicyConfig) -> None:
    _require(o.source in SOURCES, "offpolicy.source", f"must be one of {list(SOURCES)}, got {o.source!r}")
    _require(o.anchor in ANCHORS, "offpolicy.anchor", f"must be one of {list(ANCHORS)}, got {o.anchor!r}")
    _require(o.weight_cap > 0 and math.isfinite(o.weight_cap), "offpolicy.weight_cap",
             f"must be a finite number > 0 (the decoupled behaviour weight's cap), got {o.weight_cap}")
    for source, keys in SOURCE_KEYS.items():
        for key in keys:
            if source != o.source and getattr(o, key) is not None:
                raise ConfigError(f"offpolicy.{key} belongs to offpolicy.source={source}, but the "
                                  f"source is {o.source}; drop offpolicy.{key} or set "
                                  f"offpolicy.source={source}")
    if o.source == "delay":
        _require(o.delay is not None, "offpolicy.delay",
                 "must be set with offpolicy.source=delay: the steps between generating a "
                 "rollout and training on it (0 = fresh)")
        _require(o.delay >= 0, "offpolicy.delay", f"must be >= 0 (steps of lag), got {o.delay}")
    if o.source == "replay":
        for key, default in REPLAY_DEFAULTS.items():
            if getattr(o, key) is None:
                setattr(o, key, default)
        _require(o.replay_capacity >= 1, "offpolicy.replay_capacity",
                 f"must be >= 1, got {o.replay_capacity}")
        _require(o.replay_draws >= 0, "offpolicy.replay_draws", f"must be >= 0, got {o.replay_draws}")
        _require(o.replay_draws <= o.replay_capacity, "offpolicy.replay_draws",
                 f"is {o.replay_draws}: that draws more rollouts than the buffer holds "
                 f"(offpolicy.replay_capacity={o.replay_capacity}); draw at most that many")


def _check_partial(c: Config) -> None:
    o = c.offpolicy
    if o.source != "partial":
        return
    _require(o.token_budget is not None, "offpolicy.token_budget",
             "must be set with offpolicy.source=partial: the new tokens a response may get per step")
    _require(o.token_budget >= 1, "offpolicy.token_budget", f"must be >= 1, got {o.token_budget}")
    if o.mask_stale_prefix is None:
        o.mask_stale_prefix = False
    _require(c.rollout.backend == "hf", "offpolicy.source",
             "=partial continues responses on the hf rollout engine only; use rollout=hf")


def _check_rest(c: Config) -> None:
    _require(c.seed >= 0, "seed", f"must be >= 0, got {c.seed}")
    _require(c.resume in ("auto", "true", "false"), "resume", f"must be auto, true or false, got {c.resume!r}")
    _require(c.model.kind in ("tiny", "hf"), "model.kind", f"must be tiny or hf, got {c.model.kind!r}")
    if c.model.kind == "hf":
        path = c.model.path
        _require(bool(path), "model.path", "must name an HF model (hub name or local path) for model.kind=hf")
        looks_local = path.startswith((".", "/", "~")) or Path(path).expanduser().exists()
        _require(not looks_local or Path(path).expanduser().exists(), "model.path",
                 f"points to {path!r}, which does not exist")
    if c.model.kind == "tiny":
        from src.models.warm_start import resolve_configs
        try:
            resolve_configs(c.model.architecture, c.model.sft)
        except ValueError as e:
            message = str(e).replace("model.", "model.architecture.").replace("sft.", "model.sft.")
            key = "model.sft" if "model.sft." in message else "model.architecture"
            raise ConfigError(f"{key}: {message}") from None
    _require(c.model.dtype in ("float32", "bfloat16", "float16"), "model.dtype",
             f"must be float32, bfloat16 or float16, got {c.model.dtype!r}")
    _require(c.model.autocast in (None, "bfloat16"), "model.autocast",
             f"must be null or bfloat16, got {c.model.autocast!r}")
    from src.tasks import TASKS  # late: the task registry imports task modules
    _require(c.task.name in TASKS, "task.name", f"must be one of {sorted(TASKS)}, got {c.task.name!r}")
    _check_task_params(c)
    from src.tasks.rewards import REWARD_SOURCES
    _require(c.task.reward in REWARD_SOURCES, "task.reward",
             f"must be one of {list(REWARD_SOURCES)}, got {c.task.reward!r}")
    _require(0.0 < c.task.reward_p < 1.0, "task.reward_p",
             f"must be in (0, 1) (the chance of reward 1 under task.reward=random), got {c.task.reward_p}")
    _require(c.task.eval_problems >= 1, "task.eval_problems", f"must be >= 1, got {c.task.eval_problems}")
    _require(c.rollout.backend in ("hf", "vllm"), "rollout.backend", f"must be hf or vllm, got {c.rollout.backend!r}")
    _require(c.rollout.max_new_tokens >= 1, "rollout.max_new_tokens", f"must be >= 1, got {c.rollout.max_new_tokens}")
    _require(c.rollout.temperature > 0, "rollout.temperature", f"must be > 0, got {c.rollout.temperature}")
    _require(0 < c.rollout.top_p <= 1, "rollout.top_p", f"must be in (0, 1], got {c.rollout.top_p}")
    _require(c.logger.backend in ("local", "wandb"), "logger.backend", f"must be local or wandb, got {c.logger.backend!r}")
    _require(0 < c.logger.token_fraction <= 1, "logger.token_fraction",
             f"must be in (0, 1], got {c.logger.token_fraction}")
    _require(c.eval.every >= 1, "eval.every", f"must be >= 1, got {c.eval.every}")
    _require(c.eval.samples >= 1, "eval.samples", f"must be >= 1, got {c.eval.samples}")
    _require(c.checkpoint.every >= 1, "checkpoint.every", f"must be >= 1, got {c.checkpoint.every}")
    _require(c.checkpoint.keep >= 1, "checkpoint.keep", f"must be >= 1, got {c.checkpoint.keep}")
    _require(c.device in ("cpu", "auto") or re.fullmatch(r"cuda(:\d+)?", c.device) is not None,
             "device", f"must be cpu, cuda, cuda:N (N = 0, 1, ...) or auto, got {c.device!r}")
    if c.model.kind == "tiny":
        _check_tiny_sizes(c)


def _check_tiny_sizes(c: Config) -> None:
    """What the tiny model's shape allows: heads that divide the width, and room in its
    position table for a prompt plus the longest response (else generation runs past it)."""
    from src.models.warm_start import resolve_configs

    m, _ = resolve_configs(c.model.architecture, c.model.sft)
    hidden, heads = int(m["hidden_size"]), int(m["num_heads"])
    _require(heads >= 1 and hidden % heads == 0, "model.architecture.num_heads",
             f"must divide model.architecture.hidden_size={hidden}, got {heads}")
    positions = int(m["max_position_embeddings"])
    if c.rollout.backend != "hf":  # vLLM checks its own max_model_len when it starts
        return
    _require(c.rollout.max_new_tokens < positions, "rollout.max_new_tokens",
             f"must leave room for a prompt in the tiny model's {positions} positions "
             f"(model.architecture.max_position_embeddings), got {c.rollout.max_new_tokens}")


def _check_task_params(c: Config) -> None:
    """Task parameters, checked without reading any data (tasks/*.check_params)."""
    from src.tasks import TASKS  # late: the task registry imports task modules

    task = TASKS.get(c.task.name)
    check = getattr(task, "check_params", None)
    if check is None:
        return
    try:
        check(**dict(c.task.params))
    except (TypeError, ValueError) as e:
        raise ConfigError(str(e)) from None


def validate(cfg: DictConfig | dict) -> Config:
    """Typed, checked config. Raises ConfigError naming the first bad key."""
    raw = cfg if isinstance(cfg, DictConfig) else OmegaConf.create(cfg)
    raw = OmegaConf.masked_copy(raw, [k for k in raw if k != "hydra"]) if "hydra" in raw else raw
    if isinstance(raw.get("resume"), bool):  # Hydra reads `resume=true` as a bool
        raw = OmegaConf.merge(raw, {"resume": "true" if raw.resume else "false"})
    try:
        plain = OmegaConf.to_container(raw, resolve=True)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "config"
        raise ConfigError(f"{key}: {str(e).splitlines()[0]}") from None
    plain, params = _split_method(plain)
    try:
        typed = OmegaConf.merge(OmegaConf.structured(Config), plain)
        config: Config = OmegaConf.to_object(typed)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "config"
        reason = str(e).splitlines()[0]
        raise ConfigError(f"{key}: {reason}") from None
    config.method.params = params
    _check_method(config.method)
    _check_train(config.train)
    _check_offpolicy(config.offpolicy)
    _check_partial(config)
    _check_rest(config)
    return config


def to_container(config: Config) -> dict:
    """The resolved config as plain data (config.yaml), the method in its yaml layout."""
    out = OmegaConf.to_container(OmegaConf.structured(config), resolve=True)
    out["method"] = config.method.to_container()
    return out
