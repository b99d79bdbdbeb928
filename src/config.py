"""Typed config schema and validation, run before any work starts.

Each field is one `setting(default, help, check)` (src/config_fields.py): the one place
of its default (Hydra's `project_defaults`, given by src/compose.py, so `conf/` holds only
what differs), its help (`python -m src.run --help`) and its own check. Hydra composes `conf/`; `validate()` merges
the result onto these dataclasses (so types are checked by OmegaConf), runs every field's
check, then the checks that read several fields. Every failure is a `ConfigError` whose
message starts with the dotted key, e.g. `train.staleness must be >= 1, got 0`.

It imports no subsystem: what its checks need from the registries (methods, sources, tasks,
corrections, the tiny model) it reads through src/registry.py, which those fill on import
(src/compose.py loads them all); what needs this machine (packages, compilers, the device)
src/preflight.py checks (`check_installed`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

# Besides omegaconf, only plain-Python leaves that import no subsystem (the list and why:
# tests/test_config_imports.py).
from src import registry
from src._numerics import MODES as NUMERICS_MODES
from src._numerics import active_mode as active_numerics
from src.choices import ANCHORS, PRECISIONS, WEIGHT_RULES
from src.config_fields import (
    ConfigError,
    above,
    at_least,
    check_fields,
    finite_above,
    finite_at_least,
    in_half_open_unit,
    in_open_unit,
    one_of,
    or_none,
    setting,
)
from src.eval_schedule import check_at
from src.model_dtypes import MODEL_DTYPES
from src.run_vocab import SHARED_METHOD_KEYS
from src.updates import SPLITS, STALENESS_MODES, minibatch_size

OPTIMIZERS = ("adamw", "sgd")
COMPILE_BACKENDS = ("none", "inductor", "aot_eager")  # train.compile


@dataclass
class MethodConfig:
    """What every method shares; its own parameters are `method.<objective>` in the yaml.

    `params` holds the objective's parameter dataclass (src/algorithms/methods/<objective>.py,
    where their defaults and help live), validated by it. The objectives are the registry's
    `methods` (src/registry.py).
    """

    name: str = "ppo"  # label used in run dirs and figures
    objective: str = "ppo"  # registry key of the methods (src/algorithms/methods/)
    aggregation: str = "token-mean"  # token-mean | seq-mean-token-mean | seq-mean-token-sum-norm
    params: Any = None  # the objective's parameters (method.<objective> in the yaml)

    def __post_init__(self) -> None:
        methods = registry.read("methods")
        if self.params is None and self.objective in methods:
            self.params = methods[self.objective].Params()

    def build(self, norm_length: int | None = None) -> Any:
        """The method (a `src.algorithms.Method`), bound to these parameters and the shared
        loss settings. `norm_length`: the Dr. GRPO constant of seq-mean-token-sum-norm (max
        response length)."""
        return registry.read("method.build")(self.objective, self.params,
                                             aggregation=self.aggregation, norm_length=norm_length)

    def kwargs(self, norm_length: int | None = None) -> dict[str, Any]:
        """Keyword arguments for `src.algorithms.policy_loss(self.objective, ...)`."""
        return {**dataclasses.asdict(self.params), "aggregation": self.aggregation,
                "norm_length": norm_length}

    def to_container(self) -> dict[str, Any]:
        """The `method:` section as written in config.yaml: shared keys, method.<objective>,
        then the method's traits (for analysis; derived, so never read back)."""
        out = {k: getattr(self, k) for k in SHARED_METHOD_KEYS}
        out[self.objective] = dataclasses.asdict(self.params)
        out["traits"] = registry.read("methods")[self.objective].traits.to_config()
        return out


def _said(names: Iterable[str]) -> str:
    """'a, b or c'."""
    *rest, last = names
    return f"{', '.join(rest)} or {last}" if rest else last


def _one_of_registered(name: str):
    """The check of a field whose values are a registry's names, read when it runs."""
    return lambda value: one_of(registry.read(name))(value)


@dataclass
class ExperimentConfig:
    name: str = setting("staleness_1x", "label used in run dirs and figures")
    description: str = setting("", "one line on what the experiment runs")


@dataclass
class ModelConfig:
    name: str = setting("tiny", "label of the model")
    kind: str = setting("tiny", "tiny (built and warm-started here) | hf (any HF causal LM)",
                        one_of(("tiny", "hf"), "tiny or hf"))
    path: str | None = setting(None, "hf: hub name or local path; package:<module>: the install "
                               "dir of a Python package that ships the files (src/models/packaged.py)")
    gguf_file: str | None = setting(None, "hf: a GGUF file in model.path, dequantized to model.dtype "
                                    "on load (needs the gguf package)")
    # Changes no number: the cached entry holds the very tensors the GGUF load gives.
    gguf_cache: bool = setting(True, "hf: keep a GGUF file's dequantized model and tokenizer in "
                               "cache_dir/gguf/ (keyed by the file's sha256) and load them from "
                               "there after the first run; false: read the GGUF every run")
    install: str | None = setting(None, "hf: the command that installs what model.path and "
                                  "model.gguf_file need; a config error shows it when they are missing")
    dtype: str = setting("float32", "weights' dtype", one_of(MODEL_DTYPES, _said(MODEL_DTYPES)))
    autocast: str | None = setting(None, "bfloat16: bf16 matmuls, weights stay in `dtype` "
                                   "(src/models/precision.py)", one_of((None, "bfloat16"), "null or bfloat16"))
    gradient_checkpointing: bool = setting(False, "recompute activations in the backward pass")
    trust_remote_code: bool = setting(False, "hf: run the model repo's own code")
    chat_template: bool = setting(True, "hf: apply the tokenizer's chat template when it has one")
    architecture: dict[str, Any] = setting({}, "tiny: overrides of the architecture defaults")
    sft: dict[str, Any] = setting({}, "tiny: warm-start SFT overrides")
    warm_start_seed: int = setting(0, "one base model shared by every RL seed, as in the paper")
    # Cost levers for a pretrained model (docs/pretrained.md): each trains fewer weights, so
    # each is another testbed, not a speedup of this one, unless its regime is measured equal.
    freeze_embeddings: bool = setting(False, "true: the input embeddings get no gradient (a tied "
                                      "LM head with them)")
    freeze_layers: int = setting(0, "the lowest N decoder layers get no gradient", at_least(0))
    lora_r: int = setting(0, "LoRA rank through peft (0: off, train the weights themselves); the "
                          "base weights are then frozen", at_least(0))
    lora_alpha: float = setting(16.0, "LoRA scale numerator (the update is alpha / r * B A)",
                                finite_above(0))
    lora_targets: list[str] = setting(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                       "up_proj", "down_proj"], "LoRA: the module names it adapts")


@dataclass
class TaskConfig:
    name: str = setting("arithmetic", "task registry key (src/tasks/)")
    params: dict[str, Any] = setting({}, "the task's own parameters (its constructor's)")
    eval_problems: int = setting(256, "held-out problems per eval (x eval.samples sampled responses)",
                                 at_least(1))
    reward: str = setting("verifier", "verifier | random: Bernoulli(reward_p) per response, "
                          "independent of the text (a control; src/tasks/rewards.py)")
    reward_p: float = setting(0.5, "the chance of reward 1 under task.reward=random",
                              in_open_unit("the chance of reward 1 under task.reward=random"))


@dataclass
class RolloutConfig:
    backend: str = setting("hf", "hf | vllm", one_of(("hf", "vllm"), "hf or vllm"))
    max_new_tokens: int = setting(64, "longest response, in tokens", at_least(1))
    # Every scoring pass of the trainer (behaviour, old log-probs, loss) scores logits / T at
    # this temperature, so any T > 0 is consistent (src/policy.py); evals use eval.temperature.
    temperature: float = setting(1.0, "sampling temperature; the trainer scores logits / T too",
                                 finite_above(0))
    top_p: float = setting(1.0, "nucleus sampling mass", in_half_open_unit())
    precision: str = setting("fp32", "the sampler's weights: fp32 (the trainer's own model) | bf16 "
                             "| fp16 | int8 (W8A8 dynamic, as a quantized engine; "
                             "src/rollout/sampler_precision.py)", one_of(PRECISIONS))
    # Where a rollout's behaviour log-probs (and entropies) come from. scored: the trainer's
    # own pass over the mini-batch tensors, so update 0's ratio is 1 bit for bit. sampler:
    # the decode loop's own numbers, which skips that pass (about a fifth of a step) but
    # differs from it by the kernels' rounding (a KV-cached decode against one forward);
    # docs/pretrained.md measures both.
    behaviour: str = setting("scored", "scored (the trainer's pass) | sampler (the decode loop's "
                             "log-probs and entropies; hf backend, fp32, top_p 1; no pass)",
                             one_of(("scored", "sampler")))
    params: dict[str, Any] = setting({}, "backend-specific")


@dataclass
class LoggerConfig:
    backend: str = setting("local", "local | wandb", one_of(("local", "wandb"), "local or wandb"))
    project: str = setting("bapo-repro", "wandb project")
    mode: str | None = setting(None, "wandb mode; null: the WANDB_MODE environment variable, else offline")
    token_fraction: float = setting(1.0, "share of responses whose tokens are logged",
                                    in_half_open_unit())
    progress: bool = setting(True, "progress bars")
    # Rescore each update's mini-batch right after its optimizer step (one no-grad forward)
    # and log the entropy change that the step caused on its own tokens, beside the Eq. 6
    # covariance that predicts it (`entropy_after`, `entropy_change`).
    entropy_change: bool = setting(False, "true: log the entropy change each update caused on "
                                   "its own mini-batch (+1 no-grad forward per update)")


@dataclass
class TrainConfig:
    steps: int = setting(30, "rollout steps", above(0))
    prompts_per_step: int = setting(16, "prompts per rollout", above(0))
    group_size: int = setting(8, "responses per prompt",
                              at_least(2, "group baselines need two samples"))
    staleness: int = setting(1, "k optimizer updates per rollout; update j uses data j updates stale",
                             at_least(1))
    # How k = staleness updates are made from one rollout (see STALENESS_MODES):
    # minibatch: one rollout of P*G responses split into k mini-batches of P*G/k;
    # fixed_update: a rollout of k*P*G responses split into k mini-batches of P*G, so every
    # update sees as many responses as a 1x update and only the data's age changes;
    # epochs: k full-batch updates on one rollout of P*G (Algorithm 1's inner loop).
    staleness_mode: str = setting("minibatch", "minibatch: k mini-batches of P*G/k | fixed_update: "
                                  "rollout of k*P*G, k mini-batches of P*G | epochs: k full-batch "
                                  "updates", one_of(STALENESS_MODES))
    epochs: int = setting(1, "minibatch/fixed_update: repeat the pass over the mini-batches",
                          at_least(1))
    # responses: each mini-batch a seeded draw of responses across groups, so it carries the
    # groups' sign imbalance; groups: a seeded draw of whole prompt groups, whose advantages
    # sum to zero, so the positive share of a mini-batch is set by lengths alone.
    minibatch_split: str = setting("responses", "responses: mini-batches draw responses across "
                                   "groups | groups: whole prompt groups per mini-batch",
                                   one_of(SPLITS))
    # Each update accumulates gradients over micro-batches of this size, exactly as one pass
    # over its mini-batch would.
    micro_batch_size: int | None = setting(None, "responses per forward/backward (gradient "
                                           "accumulation); null: the whole mini-batch")
    # sgd: on-policy AdamW lost accuracy at lr >= 1e-4 and barely learned at 5e-5
    # (experiments/calibration/, README "The CPU testbed").
    optimizer: str = setting("sgd", "adamw | sgd (heavy-ball momentum betas[0]); one optimizer "
                             "for every method", one_of(OPTIMIZERS))
    lr: float = setting(0.005, "one rate for every method (SGD); 0.03 collapsed the policy, "
                        "0.01 swung", finite_above(0))
    # torch's fused CPU kernels take one pass per tensor instead of several: on
    # SmolLM2-135M's 272 tensors an AdamW step alone took 4-6x less time, yet a whole
    # smol_4x step did not move (1.00x, benchmarks/README.md). Their rounding differs from
    # the default loop in the last bit of a few weights, so it is opt-in: committed runs
    # used the loop.
    fused_optimizer: bool = setting(False, "true: torch's fused AdamW/SGD kernel (faster; last "
                                    "bits differ from the default per-tensor loop)")
    # torch.compile of the scoring forward (behaviour pass, old log-probs, each update's
    # forward and backward), never of the decode loop, whose KV cache changes shape every
    # token. dynamic=True: every mini-batch has another padded length. inductor writes its own
    # kernels, so the numbers leave the pinned numerics mode's: opt-in, committed runs are
    # eager. aot_eager traces the same graphs without generating kernels (checks the wiring).
    compile: str = setting("none", "none | inductor (torch.compile's CPU/GPU kernels for the "
                           "scoring forward; the first calls compile) | aot_eager (trace only)",
                           one_of(COMPILE_BACKENDS))
    # Two layouts of the scoring forward that compute the same numbers with less work, equal
    # to the plain forward only to float rounding (other matmul shapes), so both are opt-in
    # and committed runs use neither (docs/pretrained.md).
    shared_prefix: bool = setting(False, "true: each distinct prompt of a forward runs once and "
                                  "its responses run on its KV cache, gradients through the "
                                  "shared prefix (src/shared_prefix.py)")
    pack: float | None = setting(None, "a share s in (0, 1): each forward's rows are sorted by "
                                 "response length and cut into the fewest buckets with at most s "
                                 "of their response slots padding, one forward each "
                                 "(src/packing.py); null: off",
                                 or_none(in_open_unit("the most padding a bucket may hold")))
    weight_decay: float = setting(0.0, "decoupled weight decay", finite_at_least(0))
    betas: list[float] = setting([0.9, 0.999], "adamw's betas; sgd's momentum is betas[0]")
    warmup_steps: int = setting(0, "linear learning-rate warmup, in steps", at_least(0))
    grad_clip: float = setting(1.0, "gradient-norm clip", above(0))
    advantage_std_norm: bool = setting(True, "divide group advantages by their std")
    max_bad_updates: int = setting(5, "non-finite updates in a row before the run stops", at_least(1))
    threads: int = setting(2, "torch CPU threads", at_least(1))


@dataclass
class OffPolicyConfig:
    """Where each step's training data comes from, and which policy the ratio is taken
    against (src/schedule/). The default, fresh + coupled, is the paper's staleness. Each
    source's own keys (offpolicy.delay, ...) are its `Params` (src/schedule/sources/), held
    here as flat fields, null unless that source is chosen (its check fills the default)."""

    source: str = setting("fresh", "where a step's training data comes from: one of the "
                          "sources of src/schedule/sources/ (--help lists them below)",
                          _one_of_registered("sources"))
    anchor: str = setting("coupled", "coupled: r = pi/pi_behaviour | recompute: r = "
                          "pi/pi_step_start | decoupled (AReaL): clip pi/pi_step_start, times the "
                          "behaviour weight pi_step_start/pi_behaviour cut at weight_cap", one_of(ANCHORS))
    # A weight of 1 is a token the policy has not moved since generation; a cap at or below
    # 1 would cut every token it has moved toward, so it must be above 1 (as AReaL requires).
    weight_cap: float = setting(5.0, "decoupled only: cap of the behaviour weight (AReaL's default "
                                "5.0; verl's truncated IS uses 2.0)",
                                finite_above(1, "the decoupled behaviour weight's cap; 1 is an "
                                             "unmoved token"))
    weight_rule: str = setting("mask", "decoupled only: a token whose behaviour weight is above "
                               "weight_cap: mask (weight 0, still counted in the token mean; "
                               "AReaL's default) | clamp (weight = weight_cap; verl's truncated IS, "
                               "AReaL's action=clamp)", one_of(WEIGHT_RULES))
    # Each source's parameters, in the sources' order, as src/schedule/sources/__init__.py
    # offpolicy_fields derives them (tests/test_source_registry.py holds the two equal).
    delay: int | None = setting(None, "delay only: K steps between generating a rollout and "
                                "training on it (lag in updates: K*k .. K*k+k-1)")
    delay_start: str | None = setting(
        None, "delay only: where the queue's first K steps get their data: initial (null; "
        "rollouts of the initial weights, made before step 0, as M2PO's queue) | fresh (step "
        "t < K trains on a rollout its own weights just made, on-policy; the lag jumps to K "
        "steps at step K)")
    replay_capacity: int | None = setting(None, "replay only: rollouts kept (null: 4)")
    replay_draws: int | None = setting(None, "replay only: rollouts drawn per step (null: 1)")
    token_budget: int | None = setting(None, "partial only: new tokens a response may get per "
                                       "step (unfinished ones continue next step)")
    mask_stale_prefix: bool | None = setting(None, "partial only: true keeps tokens older than "
                                             "the response's last segment out of the loss "
                                             "(null: false)")


@dataclass
class EvalConfig:
    every: int = setting(10, "steps between evals", at_least(1))
    greedy: bool = setting(True, "greedy accuracy")
    sampled: bool = setting(True, "sampled accuracy")
    samples: int = setting(4, "sampled responses per held-out problem", at_least(1))
    temperature: float = setting(1.0, "sampled evals' temperature, whatever rollout.temperature is",
                                 finite_above(0))
    at: list | None = setting(None, "the steps evaluated besides step 0, increasing, ending at "
                              "train.steps (null: every eval.every steps and the end)")
    final_problems: int | None = setting(None, "held-out problems of the evals at step 0 and of "
                                         "the last three, which the final accuracy averages (null: "
                                         "task.eval_problems for every eval)", or_none(at_least(1)))


@dataclass
class CorrectionConfig:
    """The training-inference mismatch correction, in verl's keys (src/corrections/,
    docs/mismatch.md). Off by default: no weight, no mask, the behaviour pass as old policy;
    the mismatch diagnostics are logged either way."""

    name: str = setting("none", "label of the correction (its conf/correction/ preset)")
    rollout_is: str | None = setting(None, "null | token | sequence: the IS weight pi_old / mu per "
                                     "token, or per response (product of its tokens' ratios)")
    rollout_is_threshold: Any = setting(2.0, "IS: a number truncates the weight there (TIS); a "
                                        "'lo_hi' string zeroes it outside [lo, hi] (TRL's *_mask, "
                                        "IcePop)")
    rollout_is_batch_normalize: bool = setting(False, "IS: weights normalised to mean 1 over the "
                                               "step's training batch")
    rollout_rs: str | None = setting(None, "rejection: a comma list of token_k1..3, seq_sum_k1..3, "
                                     "seq_mean_k1..3 (seq_mean_k1: Geo-RS), seq_max_k2..3; "
                                     "rejected tokens leave the loss")
    rollout_rs_threshold: Any = setting(None, "rejection: one threshold, or one per option; k1 "
                                        "options bound the ratio ('lo_hi', or u for [1/u, u])")
    bypass_mode: bool = setting(False, "true: the ratio is taken against the sampler's log-probs "
                                "(no behaviour pass as old policy; verl's bypass, ppo_clip)")


@dataclass
class CheckpointConfig:
    every: int = setting(10, "steps between checkpoints", at_least(1))
    keep: int = setting(2, "newest checkpoints kept while the run goes on", at_least(1))
    # A finished run needs no checkpoint to be skipped, analysed or verified.
    keep_final: bool = setting(True, "a finished run keeps its last checkpoint (to continue "
                               "training from it); false: none")


def _device(value: str) -> str | None:
    if value in ("cpu", "auto") or re.fullmatch(r"cuda(:\d+)?", value) is not None:
        return None
    return f"must be cpu, cuda, cuda:N (N = 0, 1, ...) or auto, got {value!r}"


@dataclass
class Config:
    seed: int = setting(0, "RL seed (the warm start is shared: model.warm_start_seed)", at_least(0))
    device: str = setting("cpu", "cpu | cuda | cuda:N | auto", _device)
    resume: str = setting("auto", "auto: continue an unfinished run dir, skip a finished one | "
                          "true | false", one_of(("auto", "true", "false"), "auto, true or false"))
    overwrite: bool = setting(False, "true: move an existing run dir aside and start fresh")
    cache_dir: str = setting(".cache", "warm-start and GGUF weight cache (a run writes only here and in its run dir)")
    # Its default is the mode this process loaded torch in (src/_numerics.py: the command
    # line's numerics=..., else REPRO_NUMERICS, else portable), so a yaml cannot switch it.
    numerics: str = setting(active_numerics(), "portable: CPU kernels pinned to AVX2, the same numbers "
                            "on any x86-64 CPU | native: the CPU's widest instructions (its own "
                            "rounding); read before torch loads, so give it on the command line "
                            "(src/_numerics.py)", one_of(NUMERICS_MODES))
    method: MethodConfig = field(default_factory=MethodConfig)
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    offpolicy: OffPolicyConfig = field(default_factory=OffPolicyConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    correction: CorrectionConfig = field(default_factory=CorrectionConfig)
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
    methods = registry.read("methods")
    method = dict(raw.get("method") or {})
    objective = method.get("objective", MethodConfig.objective)
    _require(objective in methods, "method.objective",
             f"must be one of {sorted(methods)}, got {objective!r}")
    params_cls = methods[objective].Params
    section = None
    method.pop("traits", None)  # written with the config for analysis, derived from the objective
    for key in [k for k in method if k not in SHARED_METHOD_KEYS]:
        value = method.pop(key)
        if key == objective:
            section = value
        elif key in methods:
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
        params.checked()
    except ValueError as e:
        raise ConfigError(f"method.{objective}.{e}") from None
    return {**raw, "method": method}, params


def _check_method(m: MethodConfig) -> None:
    aggregations = registry.read("method.aggregations")
    _require(m.aggregation in aggregations, "method.aggregation",
             f"must be one of {list(aggregations)}, got {m.aggregation!r}")


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
    """What the train fields' own checks cannot see: how they fit together."""
    batch = t.prompts_per_step * t.group_size
    if t.staleness_mode == "minibatch":
        _require(batch % t.staleness == 0, "train.staleness",
                 f"={t.staleness} must divide the rollout batch prompts_per_step*group_size={batch}")
    if t.minibatch_split == "groups" and t.staleness_mode != "epochs":
        _require(t.prompts_per_step % t.staleness == 0, "train.minibatch_split",
                 f"must be responses when train.staleness={t.staleness} does not divide train.prompts_per_step="
                 f"{t.prompts_per_step} (groups: every mini-batch holds as many whole groups)")
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
    _require(len(t.betas) == 2 and all(0 <= b < 1 for b in t.betas), "train.betas",
             f"must be two values in [0, 1), got {list(t.betas)}")


def _check_rest(c: Config) -> None:
    """The model's path and shape, and the registries' names (task, reward). A `package:`
    path's package, a GGUF reader and peft are this machine's: src/preflight.py checks them."""
    if c.model.kind == "hf":
        path = c.model.path
        _require(bool(path), "model.path", "must name an HF model (hub name or local path) for model.kind=hf")
        looks_local = path.startswith((".", "/", "~")) or Path(path).expanduser().exists()
        _require(not looks_local or Path(path).expanduser().exists(), "model.path",
                 f"points to {path!r}, which does not exist")
    _check_trainable(c.model)
    if c.model.kind == "tiny":
        settings_problem = registry.read("tiny_model.settings_problem")
        problem = settings_problem(c.model.architecture, c.model.sft)  # an unknown key, a bad value
        if problem is not None:
            raise ConfigError(problem)
    tasks = registry.read("tasks")
    _require(c.task.name in tasks, "task.name", f"must be one of {sorted(tasks)}, got {c.task.name!r}")
    _check_task_params(c)
    rewards = registry.read("tasks.rewards")
    _require(c.task.reward in rewards, "task.reward",
             f"must be one of {list(rewards)}, got {c.task.reward!r}")
    if c.model.kind == "tiny":
        _check_tiny_sizes(c)


def _check_trainable(m: ModelConfig) -> None:
    """What the cost levers need: modules for LoRA to adapt (peft itself: src/preflight.py),
    and layers to freeze that the model has (the tiny family's count is known here; an HF
    model's is checked when it loads)."""
    if m.lora_r:
        _require(bool(m.lora_targets), "model.lora_targets", "must name at least one module for "
                 f"model.lora_r={m.lora_r}")
    if m.kind == "tiny" and m.freeze_layers:
        layers = registry.read("tiny_model.layers")(m.architecture)
        _require(m.freeze_layers <= layers, "model.freeze_layers",
                 f"must be <= the model's {layers} layers, got {m.freeze_layers}")


def _check_tiny_sizes(c: Config) -> None:
    """What the tiny model's shape allows: heads that divide the width, and room in its
    position table for a prompt plus the longest response (else generation runs past it)."""
    hidden, heads, positions = registry.read("tiny_model.shape")(c.model.architecture)
    _require(heads >= 1 and hidden % heads == 0, "model.architecture.num_heads",
             f"must divide model.architecture.hidden_size={hidden}, got {heads}")
    if c.rollout.backend != "hf":  # vLLM checks its own max_model_len when it starts
        return
    _require(c.rollout.max_new_tokens < positions, "rollout.max_new_tokens",
             f"must leave room for a prompt in the tiny model's {positions} positions "
             f"(model.architecture.max_position_embeddings), got {c.rollout.max_new_tokens}")


def _check_task_params(c: Config) -> None:
    """Task parameters, checked without reading any data (tasks/*.check_params)."""
    task = registry.read("tasks").get(c.task.name)
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
    check_fields(config, "")
    _check_train(config.train)
    registry.read("sources.check")(config.offpolicy, config)  # the source's own keys and checks
    _check_rest(config)
    _check_rollout(config)
    _check_shared_prefix(config)
    if problem := check_at(config.eval.at, config.train.steps):
        raise ConfigError(f"eval.at {problem}")
    return config


def _check_shared_prefix(c: Config) -> None:
    """train.shared_prefix runs the responses on the prompt's KV cache, which a checkpointed
    layer does not keep and which is not traced under torch.compile."""
    if not c.train.shared_prefix:
        return
    if c.model.gradient_checkpointing:
        raise ConfigError("train.shared_prefix=true needs model.gradient_checkpointing=false (a "
                          "checkpointed layer keeps no KV cache); set one of them false")
    if c.train.compile != "none":
        raise ConfigError(f"train.shared_prefix=true needs train.compile=none (the cached forward "
                          f"is not traced), got train.compile={c.train.compile}; set one of them off")


def _check_rollout(c: Config) -> None:
    """The sampler's precision on this backend (on this device: src/preflight.py), and the
    correction's keys."""
    precision = c.rollout.precision
    if c.rollout.backend == "vllm":
        _require(precision != "int8", "rollout.precision",
                 "=int8 is the hf backend's W8A8 sampler; vLLM needs a quantized checkpoint "
                 "(rollout.params.engine_kwargs.quantization) instead")
        dtype = dict(c.rollout.params).get("dtype", "auto")
        _require(precision == "fp32" or dtype == "auto", "rollout.params.dtype",
                 f"={dtype} and rollout.precision={precision} both set the engine's dtype; "
                 "keep one (rollout.params.dtype=auto)")
    try:
        correction = registry.read("corrections.build")(c.correction)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    _require(not correction.bypass_mode or c.offpolicy.anchor == "coupled", "correction.bypass_mode",
             f"=true takes the ratio against the sampler, which replaces the anchor; it needs "
             f"offpolicy.anchor=coupled, got {c.offpolicy.anchor}")
    if c.rollout.behaviour == "sampler":
        _check_sampler_behaviour(c, correction.active)
    if correction.active:
        _require(registry.read("sources")[c.offpolicy.source].sampler_logprobs, "correction",
                 f"needs the sampler's log-probs, which offpolicy.source={c.offpolicy.source} "
                 "does not keep; use correction=none")


def _check_sampler_behaviour(c: Config, correcting: bool) -> None:
    """rollout.behaviour=sampler stands for the trainer's pass only where the sampler is the
    trainer's own fp32 weights drawing from the distribution the trainer scores."""
    key, why = "rollout.behaviour", "=sampler takes the decode loop's log-probs as the behaviour pass's"
    _require(c.rollout.backend == "hf", key, f"{why}; the vllm backend keeps no entropies: use "
             "rollout.behaviour=scored")
    _require(c.rollout.precision == "fp32", key, f"{why}, so the sampler must be the trainer's "
             f"own fp32 weights, got rollout.precision={c.rollout.precision}; use "
             "rollout.behaviour=scored")
    _require(c.rollout.top_p == 1.0, key, f"{why}, which are of the top-p filtered "
             f"distribution at rollout.top_p={c.rollout.top_p}, not the one the trainer scores; "
             "use rollout.top_p=1.0 or rollout.behaviour=scored")
    _require(not correcting, key, f"{why}, so a mismatch correction would correct nothing; "
             "use correction=none or rollout.behaviour=scored")
    _require(registry.read("sources")[c.offpolicy.source].whole_rollouts, key, f"{why}; offpolicy.source="
             f"{c.offpolicy.source} builds responses across policy versions, whose tokens are "
             "scored per version: use rollout.behaviour=scored")


def to_container(config: Config) -> dict:
    """The resolved config as plain data (config.yaml), the method in its yaml layout."""
    out = OmegaConf.to_container(OmegaConf.structured(config), resolve=True)
    out["method"] = config.method.to_container()
    return out


def method_defaults(objective: str) -> dict[str, Any]:
    """The `method:` section of `objective` at its dataclass defaults (shared keys, then
    method.<objective>), without the derived traits: Hydra's `method_defaults/<objective>`
    (src/compose.py), which conf/method/<objective>.yaml pulls in first, so the yaml holds
    only what differs."""
    out = MethodConfig(name=objective, objective=objective).to_container()
    del out["traits"]
    return out
