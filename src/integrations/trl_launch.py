"""Launcher of the TRL plug: `python -m src.integrations.trl_launch --config <yaml> [key=value ...]`.

Builds the model, the project task's prompts and its verifier reward, and the project's
evaluator from a launch yaml (conf/integrations/trl_grpo.yaml, trl_grpo_tiny_cpu.yaml),
then runs `ProjectGRPOTrainer` (src/integrations/trl_grpo.py) and writes the run dir.
Under `accelerate launch` (data parallel over processes; on CPU the gloo backend):

    accelerate launch --cpu --num_processes 2 -m src.integrations.trl_launch \
        --config conf/integrations/trl_grpo_tiny_cpu.yaml

only the main process writes the run dir, with every rank's updates and token rows
(docs/scale_out.md has the same for several GPUs and nodes).
"""

from __future__ import annotations

import argparse
import sys

from src.pinning import pin_process

if __name__ == "__main__":  # a launch pins as `python -m src.run` does; an import pins nothing
    pin_process()

import torch  # noqa: E402
from trl import GRPOConfig  # noqa: E402

from src.integrations.trl_grpo import ProjectGRPOTrainer, trl_knobs  # noqa: E402


def project_config(cfg: dict, *, seed: int, max_new_tokens: int, temperature: float,
                   top_p: float):
    """The project's config (src/config.py) for what a TRL run shares with `python -m
    src.run`: the launch config's model, task and eval, TRL's sampling, and the project's
    defaults for everything the launch config leaves out."""
    import src.compose  # noqa: F401 - every registry the checks read
    from src.config import validate

    return validate({"seed": seed, "cache_dir": cfg.get("cache_dir", ".cache"),
                     "model": dict(cfg.get("model") or {}),
                     "task": dict(cfg.get("task") or {}),
                     "rollout": {"max_new_tokens": max_new_tokens, "temperature": temperature,
                                 "top_p": top_p},
                     "eval": dict(cfg.get("eval") or {})})


def build_trainer(cfg: dict) -> ProjectGRPOTrainer:
    """A ready trainer from the launch config (conf/integrations/trl_grpo.yaml format)."""
    from datasets import Dataset

    from src.build import build_evaluator, prompt_formatter
    from src.tasks import get_task

    trl_kwargs = dict(cfg.get("trl") or {})
    staleness, epochs = int(cfg.get("staleness", 1)), int(cfg.get("epochs", 1))
    trl_kwargs.update(trl_knobs(staleness, epochs=epochs, gradient_accumulation_steps=int(
        trl_kwargs.get("gradient_accumulation_steps", 1))))
    trl_kwargs.setdefault("seed", int(cfg.get("seed", 0)))
    trl_kwargs.setdefault("report_to", "none")
    args = GRPOConfig(**trl_kwargs)
    if not args.max_steps or args.max_steps <= 0:
        raise ValueError("trl.max_steps must be > 0 (optimizer steps = rollout steps * staleness * epochs)")
    method = cfg.get("method", "bapo")
    project = project_config(cfg, seed=args.seed, max_new_tokens=args.max_completion_length,
                             temperature=args.temperature, top_p=args.top_p)
    task = get_task(project.task.name, **dict(project.task.params))
    model, tokenizer, start = _model(project, task)
    fmt = prompt_formatter(project.model, tokenizer)
    rollouts = -(-args.max_steps // (staleness * epochs))
    n_prompts = rollouts * args.generation_batch_size // args.num_generations
    problems = [task.problem(start + i) for i in range(n_prompts)]
    dataset = Dataset.from_list([{"prompt": fmt(p.prompt), "problem_index": p.index} for p in problems])
    by_index = {p.index: p for p in problems}

    def task_reward(completions, problem_index, **_):
        return [task.score(by_index[i], c if isinstance(c, str) else c[-1]["content"])
                for c, i in zip(completions, problem_index, strict=True)]

    eval_fn = None
    if cfg.get("eval") and cfg["eval"].get("every"):
        evaluate = build_evaluator(project, model, tokenizer, task, fmt)
        eval_fn = evaluate
    return ProjectGRPOTrainer(
        model=model, reward_funcs=task_reward, args=args, train_dataset=dataset,
        processing_class=tokenizer, method=method, method_overrides=cfg.get("method_overrides"),
        run_dir=cfg.get("run_dir"), experiment=str(cfg.get("experiment", "trl")),
        token_fraction=float(cfg.get("token_fraction", 1.0)),
        eval_fn=eval_fn, eval_every=(cfg.get("eval") or {}).get("every"),
        extra_config={"task": {"name": project.task.name, "params": dict(project.task.params)},
                      "model": {"kind": project.model.kind, "path": project.model.path}})


def _model(project, task):
    """(model, tokenizer, the first training problem): the tiny warm start, or an HF model."""
    if project.model.kind == "tiny":
        from accelerate import PartialState

        from src.build import build_model

        # Under `accelerate launch` the main process builds (or loads) the cached warm start
        # first; the other ranks then load that same cache entry instead of training it too.
        with PartialState().main_process_first():
            model, tokenizer, info = build_model(project.model, task, torch.device("cpu"),
                                                 progress=PartialState().is_main_process,
                                                 cache_dir=project.cache_dir,
                                                 numerics=project.numerics)
        return model, tokenizer, int(info.get("next_train_index", 0))
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(project.model.path,
                                              trust_remote_code=project.model.trust_remote_code)
    model = AutoModelForCausalLM.from_pretrained(
        project.model.path, dtype=getattr(torch, project.model.dtype),
        trust_remote_code=project.model.trust_remote_code)
    return model, tokenizer, 0


_RANK_VARS = ("WORLD_SIZE", "LOCAL_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def requested_cpu_processes(parent_cmdline: list[str]) -> int | None:
    """`--num_processes N` of the `accelerate launch` command line that started this process."""
    for i, arg in enumerate(parent_cmdline):
        for flag in ("--num_processes", "--num-processes"):
            if arg == flag and i + 1 < len(parent_cmdline):
                return int(parent_cmdline[i + 1])
            if arg.startswith(f"{flag}="):
                return int(arg.split("=", 1)[1])
    return None


def fan_out_cpu_ranks(argv: list[str]) -> int | None:
    """`accelerate launch --cpu --num_processes N` (N > 1) starts this script once: accelerate
    1.x runs several CPU processes only under mpirun. Start the N ranks here with torch's own
    launcher (torch.distributed.run) on accelerate's address and port; accelerate then sees
    each as a MULTI_CPU rank on the gloo backend. Returns their exit code, or None when this
    process already is a rank (or one process was asked for)."""
    import os
    import subprocess

    env = os.environ
    if (env.get("ACCELERATE_USE_CPU", "").lower() not in ("true", "1") or "MASTER_ADDR" not in env
            or any(k in env for k in _RANK_VARS)):
        return None
    try:
        import psutil

        n = requested_cpu_processes(psutil.Process().parent().cmdline())
    except Exception:  # no parent to read: run as one process
        n = None
    if n is None or n < 2:
        return None
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={n}",
           f"--master_addr={env['MASTER_ADDR']}", f"--master_port={env.get('MASTER_PORT', '29500')}",
           "-m", "src.integrations.trl_launch", *argv]
    return subprocess.run(cmd).returncode


def main(argv: list[str] | None = None) -> int:
    from omegaconf import OmegaConf

    argv = sys.argv[1:] if argv is None else argv
    fanned = fan_out_cpu_ranks(argv)
    if fanned is not None:
        return fanned
    p = argparse.ArgumentParser(description="GRPO with the project's objectives, on TRL.")
    p.add_argument("--config", required=True, help="launch yaml (conf/integrations/trl_grpo.yaml)")
    p.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. method=ppo staleness=4")
    ns = p.parse_args(argv)
    raw = OmegaConf.merge(OmegaConf.load(ns.config), OmegaConf.from_dotlist(ns.overrides))
    cfg = OmegaConf.to_container(raw, resolve=True)
    trainer = build_trainer(cfg)
    trainer.train()
    _shut_down_ranks(trainer)
    return 0


def _shut_down_ranks(trainer) -> None:
    """Under a multi-process launch, wait for every rank and then close the process group,
    rather than let each rank exit with its connections open. In older gloo a rank that exited
    while its peer's connections were live could make the peer abort (SIGABRT, "connection
    reset by peer" raised in gloo's own thread); the bundled gloo raises it in the caller
    instead. Whether either once killed rank 1 in the test suite is not known (it was not
    reproduced: docs/integrations.md), but closing in order keeps both from happening."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        trainer.accelerator.wait_for_everyone()
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
