"""Builds the run's parts from a validated config: task, model, rollout, optimizer, eval,
and the trainer wired from them. Each builder takes the config section it reads (`build_task`
the `task` section, `build_optimizer` the `train` section, ...); `build_parts` and
`attach_trainer` hand each its own.

Every entry that trains (`python -m src.run`, the benchmarks, the GPU and vLLM checks)
composes its config with `compose_config` and gets its trainer from `build_trainer` (or
`build_parts` then `attach_trainer`, when something must happen between the model and the
trainer, as a resume's restore); what a caller does differently on purpose (a copy of an
already built model, an evaluator it runs itself) is an argument, not its own wiring.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from src.config import Config, ModelConfig, RolloutConfig, TaskConfig, TrainConfig
from src.device import pick_device
from src.models.precision import autocast_forward
from src.schedule import updates_per_rollout
from src.tasks import get_task


def build_task(task: TaskConfig):
    """The task of the config's `task` section."""
    return get_task(task.name, **dict(task.params))


def build_model(model_cfg: ModelConfig, task, device: torch.device, progress: bool, *,
                cache_dir: str, numerics: str):
    """(model, tokenizer, info) of the config's `model` section on `device`. Tiny models come
    from the warm-start cache under `cache_dir` (built once, on `device`, in the `numerics`
    mode). With `model.autocast` every forward runs under that autocast."""
    if model_cfg.kind == "tiny":
        from src.warm_start import warm_start

        model, tokenizer, info = warm_start(task, dict(model_cfg.architecture), dict(model_cfg.sft),
                                            Path(cache_dir) / "warm_start",
                                            seed=model_cfg.warm_start_seed, progress=progress,
                                            device=device, autocast=model_cfg.autocast,
                                            numerics=numerics)
    else:
        from src.models.hf import load_hf_model
        from src.models.packaged import resolve_model_path

        model, tokenizer = load_hf_model(resolve_model_path(model_cfg.path), dtype=model_cfg.dtype,
                                         device=str(device),
                                         gradient_checkpointing=model_cfg.gradient_checkpointing,
                                         trust_remote_code=model_cfg.trust_remote_code,
                                         gguf_file=model_cfg.gguf_file, progress=progress,
                                         gguf_cache_dir=Path(cache_dir) / "gguf"
                                         if model_cfg.gguf_cache else None)
        info = {"path": model_cfg.path, "next_train_index": 0}
        if model_cfg.gguf_file is not None:
            info["gguf_file"] = model_cfg.gguf_file
    model.to(device)
    m = model_cfg
    if m.freeze_embeddings or m.freeze_layers or m.lora_r:
        from src.models.trainable import apply_trainable

        info["parameters"] = apply_trainable(
            model, freeze_embeddings=m.freeze_embeddings, freeze_layers=m.freeze_layers,
            lora_r=m.lora_r, lora_alpha=m.lora_alpha, lora_targets=m.lora_targets)
    autocast_forward(model, model_cfg.autocast)
    model.train()
    return model, tokenizer, info


def prompt_formatter(model_cfg: ModelConfig, tokenizer):
    """Chat-template prompts for instruction-tuned HF models; tiny models see raw text."""
    if model_cfg.kind != "hf" or not model_cfg.chat_template or not getattr(tokenizer, "chat_template", None):
        return lambda prompt: prompt
    return lambda prompt: tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)


VLLM_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}  # rollout.precision -> vLLM's dtype


def build_backend(rollout: RolloutConfig, model, tokenizer, *, model_path: str | None = None):
    """The rollout backend of the config's `rollout` section, in `rollout.precision`: the HF
    backend holds its own copy of the weights in it; vLLM loads `model_path` and takes the
    precision as its dtype (fp32: `rollout.params.dtype`, auto)."""
    if rollout.backend == "hf":
        from src.rollout.hf import HFRollout

        return HFRollout(model, tokenizer, precision=rollout.precision,
                         sampler_entropy=rollout.behaviour == "sampler", **dict(rollout.params))
    from src.rollout.vllm import VLLMRollout  # GPU path; imported only when chosen

    params = dict(rollout.params)
    if rollout.precision in VLLM_DTYPES:
        params["dtype"] = VLLM_DTYPES[rollout.precision]
    return VLLMRollout(model, tokenizer, model_path=model_path, **params)


def build_optimizer(train: TrainConfig, model):
    """The optimizer and learning-rate schedule of the config's `train` section."""
    t = train
    # Only the weights that train (model.freeze_*, model.lora_r): frozen ones hold no
    # optimizer state. With nothing frozen this is every parameter, in the same order.
    params = [p for p in model.parameters() if p.requires_grad]
    # fused=None is torch's default: the per-tensor loop on CPU (what committed runs used)
    kernel = {"fused": True} if t.fused_optimizer else {}
    if t.optimizer == "sgd":
        optimizer = torch.optim.SGD(params, lr=t.lr, momentum=t.betas[0],
                                    weight_decay=t.weight_decay, **kernel)
    else:
        optimizer = torch.optim.AdamW(params, lr=t.lr, betas=tuple(t.betas),
                                      weight_decay=t.weight_decay, **kernel)
    warmup = max(t.warmup_steps * updates_per_rollout(t), 0)  # warmup_steps counts rollouts
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: min(1.0, (i + 1) / warmup) if warmup else 1.0)
    return optimizer, scheduler


def build_evaluator(cfg: Config, model, tokenizer, task, format_prompt, backend=None):
    """Held-out greedy and sampled accuracy; sampling is seeded, so evals are repeatable.
    Sampled evals run at `eval.temperature`, whatever the rollout's, so that runs at
    different rollout temperatures are measured alike; they score the trainer's weights in
    its own precision (`rollout.precision` is the rollout engine's, not the policy's).

    With a non-HF rollout backend (`rollout.backend=vllm`) passed as `backend`, the evals
    generate with it (greedy: temperature 0), after pushing the current weights; otherwise,
    and always on the CPU default, with `src.models.sampling.generate` on `model` (the
    decode loop of src/models/decoding.py; greedy responses equal HF `generate`'s).
    """
    from src.eval_schedule import at_problem

    # the held-out sets: task.eval_problems, and eval.final_problems for the final window
    sets = {n: task.eval_problems(n) for n in {cfg.task.eval_problems, cfg.eval.final_problems} if n}
    use_backend = backend is not None and cfg.rollout.backend != "hf"

    def responses(problems, greedy: bool, samples: int, label: str | None) -> list[tuple[int, str]]:
        """(problem index, response text) for `samples` responses per problem."""
        prompts = [format_prompt(p.prompt) for p in problems]
        if use_backend:
            backend.sync_weights(model)
            roll = backend.generate(prompts, num_samples=samples,
                                    max_new_tokens=cfg.rollout.max_new_tokens,
                                    temperature=0.0 if greedy else cfg.eval.temperature,
                                    top_p=1.0, seed=cfg.seed + 12_345)
            return list(zip(roll.group_ids.tolist(), roll.texts, strict=True))
        from src.models.sampling import generate

        gens = generate(model, tokenizer, prompts, num_samples=samples,
                        max_new_tokens=cfg.rollout.max_new_tokens,
                        temperature=cfg.eval.temperature, greedy=greedy,
                        seed=cfg.seed + 12_345, progress=label)
        return [(g.prompt_index, g.text) for g in gens]

    def accuracy(problems, greedy: bool, samples: int, label: str | None) -> float:
        scores = [task.score(problems[i], text)
                  for i, text in responses(problems, greedy, samples, label)]
        return sum(scores) / len(scores)

    def evaluate(step: int) -> dict:
        problems = sets[at_problem(cfg.eval, cfg.task.eval_problems, cfg.train.steps, step)]
        record = {"step": step, "n_problems": len(problems)}
        # A bar while it generates (it clears when done): the step-0 eval runs before the
        # training bar appears, and a large task.eval_problems takes minutes.
        label = f"eval at step {step}" if cfg.logger.progress else None
        if cfg.eval.greedy:
            record["greedy_accuracy"] = accuracy(problems, True, 1, label and f"{label}, greedy")
        if cfg.eval.sampled:
            record["sampled_accuracy"] = accuracy(problems, False, cfg.eval.samples,
                                                  label and f"{label}, sampled")
        return record

    return evaluate


def compose_config(overrides: list[str], *, installed: bool = True) -> Config:
    """conf/config.yaml composed with `overrides` (as `python -m src.run` composes it),
    validated, and (`installed`) what its values need installed here checked
    (src/preflight.py); a reader of configs alone, such as a test, may skip that check."""
    from hydra import compose, initialize_config_dir

    from src.config import validate
    from src.preflight import CONF_DIR, check_installed  # importing it loads the registries

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = validate(compose(config_name="config", overrides=list(overrides)))
    if installed:
        check_installed(cfg)
    return cfg


EVALUATE = ("trainer", "caller", "none")


@dataclass
class Parts:
    """A run's parts, as `build_parts` and `attach_trainer` made them."""

    cfg: Config
    device: torch.device
    task: Any
    model: Any
    tokenizer: Any
    info: dict  # the model's: next_train_index, the warm start's path, ...
    optimizer: Any
    scheduler: Any
    timings: dict[str, float] = field(default_factory=dict)  # model_load_s, engine_start_s
    backend: Any = None
    format_prompt: Callable[[str], str] | None = None
    evaluate: Callable[[int], dict] | None = None
    trainer: Any = None

    @property
    def start_index(self) -> int:
        """The first training problem (a warm start's SFT used the ones before)."""
        return int(self.info.get("next_train_index", 0))

    def fresh_state(self):
        """The trainer's state at step 0."""
        from src.checkpoint import TrainState

        return TrainState(task_position=self.start_index)


def build_parts(cfg: Config, *, device: torch.device | None = None, progress: bool | None = None,
                task=None, model: tuple[Any, Any, dict] | None = None,
                model_path: str | None = None) -> Parts:
    """Torch's threads and seed from `cfg`, then the task, the model and the optimizer.

    `device`: default `cfg.device` (`pick_device`); `progress`: default `cfg.logger.progress`.
    `task` and `model` (`(model, tokenizer, info)`, e.g. a copy of one built before) are used
    as given instead of being built. `model_path`: what the vLLM backend loads when it is
    not `cfg.model.path` (a tiny model's warm-start entry, a save_pretrained dir); with
    `rollout.backend=vllm` it becomes `cfg.model.path` once the model is built.
    """
    torch.set_num_threads(cfg.train.threads)
    torch.manual_seed(cfg.seed)
    device = pick_device(cfg.device) if device is None else device
    progress = cfg.logger.progress if progress is None else progress
    t0 = time.perf_counter()
    task = build_task(cfg.task) if task is None else task
    built = (build_model(cfg.model, task, device, progress, cache_dir=cfg.cache_dir,
                         numerics=cfg.numerics) if model is None else model)
    timings = {"model_load_s": time.perf_counter() - t0}
    if model_path is not None and cfg.rollout.backend == "vllm":
        cfg.model.path = model_path
    optimizer, scheduler = build_optimizer(cfg.train, built[0])
    return Parts(cfg, device, task, *built, optimizer, scheduler, timings)


def attach_trainer(parts: Parts, writer, checkpoint_dir: Path, *, evaluate: str = "trainer"):
    """The rollout backend, the prompt format, the evaluator and the `Trainer` on `parts`
    (set on it too); returns the trainer.

    `evaluate`: trainer (it evals at `eval.every`), caller (built as `parts.evaluate`, for a
    caller that runs and times the evals itself; the trainer gets none) or none.
    The backend is closed again if anything after it fails; otherwise the caller closes it.
    """
    from src.trainer import Trainer

    if evaluate not in EVALUATE:
        raise ValueError(f"evaluate must be one of {list(EVALUATE)}, got {evaluate!r}")
    cfg = parts.cfg
    t0 = time.perf_counter()
    parts.backend = build_backend(cfg.rollout, parts.model, parts.tokenizer,
                                  model_path=cfg.model.path)
    parts.timings["engine_start_s"] = time.perf_counter() - t0
    try:
        parts.format_prompt = prompt_formatter(cfg.model, parts.tokenizer)
        if evaluate != "none":
            parts.evaluate = build_evaluator(cfg, parts.model, parts.tokenizer, parts.task,
                                             parts.format_prompt, backend=parts.backend)
        parts.trainer = Trainer(cfg, parts.model, parts.tokenizer, parts.task, parts.backend,
                                parts.optimizer, parts.scheduler, writer, checkpoint_dir,
                                evaluate=parts.evaluate if evaluate == "trainer" else None,
                                format_prompt=parts.format_prompt)
    except BaseException:
        parts.backend.close()
        raise
    return parts.trainer


def build_trainer(cfg: Config, writer, checkpoint_dir: Path, *, evaluate: str = "trainer",
                  **parts_kwargs) -> Parts:
    """`build_parts` then `attach_trainer`: a ready trainer as `parts.trainer`, its first
    state `parts.fresh_state()`. `parts_kwargs`: device, progress, task, model, model_path."""
    parts = build_parts(cfg, **parts_kwargs)
    attach_trainer(parts, writer, checkpoint_dir, evaluate=evaluate)
    return parts
