"""Builds the run's parts from a validated config: task, model, rollout, optimizer, eval."""

from __future__ import annotations

from pathlib import Path

import torch

from src.config import Config
from src.models.precision import autocast_forward
from src.schedule import updates_per_rollout
from src.tasks import get_task


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device={name} but torch sees no CUDA device; use device=cpu")
    return torch.device(name)


def build_task(cfg: Config):
    return get_task(cfg.task.name, **dict(cfg.task.params))


def build_model(cfg: Config, task, device: torch.device, progress: bool):
    """(model, tokenizer, info) on `device`. Tiny models come from the warm-start cache (built
    once, on `device`). With `model.autocast` every forward runs under that autocast."""
    if cfg.model.kind == "tiny":
        from src.models.warm_start import warm_start

        model, tokenizer, info = warm_start(task, dict(cfg.model.architecture), dict(cfg.model.sft),
                                            Path(cfg.cache_dir) / "warm_start",
                                            seed=cfg.model.warm_start_seed, progress=progress,
                                            device=device, autocast=cfg.model.autocast,
                                            numerics=cfg.numerics)
    else:
        from src.models.hf import load_hf_model

        model, tokenizer = load_hf_model(cfg.model.path, dtype=cfg.model.dtype, device=str(device),
                                         gradient_checkpointing=cfg.model.gradient_checkpointing,
                                         trust_remote_code=cfg.model.trust_remote_code)
        info = {"path": cfg.model.path, "next_train_index": 0}
    model.to(device)
    autocast_forward(model, cfg.model.autocast)
    model.train()
    return model, tokenizer, info


def prompt_formatter(cfg: Config, tokenizer):
    """Chat-template prompts for instruction-tuned HF models; tiny models see raw text."""
    if cfg.model.kind != "hf" or not cfg.model.chat_template or not getattr(tokenizer, "chat_template", None):
        return lambda prompt: prompt
    return lambda prompt: tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)


def build_backend(cfg: Config, model, tokenizer):
    if cfg.rollout.backend == "hf":
        from src.rollout.hf import HFRollout

        return HFRollout(model, tokenizer, **dict(cfg.rollout.params))
    from src.rollout.vllm import VLLMRollout  # GPU path; imported only when chosen

    return VLLMRollout(model, tokenizer, model_path=cfg.model.path, **dict(cfg.rollout.params))


def build_optimizer(cfg: Config, model):
    t = cfg.train
    if t.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=t.lr, momentum=t.betas[0],
                                    weight_decay=t.weight_decay)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=t.lr, betas=tuple(t.betas),
                                      weight_decay=t.weight_decay)
    warmup = max(t.warmup_steps * updates_per_rollout(t), 0)  # warmup_steps counts rollouts
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: min(1.0, (i + 1) / warmup) if warmup else 1.0)
    return optimizer, scheduler


def build_evaluator(cfg: Config, model, tokenizer, task, format_prompt, backend=None):
    """Held-out greedy and sampled accuracy; sampling is seeded, so evals are repeatable.

    With a non-HF rollout backend (`rollout.backend=vllm`) passed as `backend`, the evals
    generate with it (greedy: temperature 0), after pushing the current weights; otherwise,
    and always on the CPU default, with `src.models.sampling.generate` on `model` (the
    decode loop of src/models/decoding.py; greedy responses equal HF `generate`'s).
    """
    problems = task.eval_problems(cfg.task.eval_problems)
    prompts = [format_prompt(p.prompt) for p in problems]
    use_backend = backend is not None and cfg.rollout.backend != "hf"

    def responses(greedy: bool, samples: int, label: str | None) -> list[tuple[int, str]]:
        """(problem index, response text) for `samples` responses per problem."""
        if use_backend:
            backend.sync_weights(model)
            roll = backend.generate(prompts, num_samples=samples,
                                    max_new_tokens=cfg.rollout.max_new_tokens,
                                    temperature=0.0 if greedy else cfg.rollout.temperature,
                                    top_p=1.0, seed=cfg.seed + 12_345)
            return list(zip(roll.group_ids.tolist(), roll.texts, strict=True))
        from src.models.sampling import generate

        gens = generate(model, tokenizer, prompts, num_samples=samples,
                        max_new_tokens=cfg.rollout.max_new_tokens,
                        temperature=cfg.rollout.temperature, greedy=greedy,
                        seed=cfg.seed + 12_345, progress=label)
        return [(g.prompt_index, g.text) for g in gens]

    def accuracy(greedy: bool, samples: int, label: str | None) -> float:
        scores = [task.score(problems[i], text) for i, text in responses(greedy, samples, label)]
        return sum(scores) / len(scores)

    def evaluate(step: int) -> dict:
        record = {"step": step, "n_problems": len(problems)}
        # A bar while it generates (it clears when done): the step-0 eval runs before the
        # training bar appears, and a large task.eval_problems takes minutes.
        label = f"eval at step {step}" if cfg.logger.progress else None
        if cfg.eval.greedy:
            record["greedy_accuracy"] = accuracy(True, 1, label and f"{label}, greedy")
        if cfg.eval.sampled:
            record["sampled_accuracy"] = accuracy(False, cfg.eval.samples, label and f"{label}, sampled")
        return record

    return evaluate
