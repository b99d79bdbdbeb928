"""Entry point: `python -m src.run experiment=staleness_4x method=bapo`.

Config problems exit with code 2 and one line naming the key, before Hydra makes a run
dir. A finished run dir is skipped, an unfinished one resumes from its last checkpoint.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from src.config import Config, ConfigError, to_container, validate

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
EXIT_CONFIG = 2
EXIT_NUMERIC = 3
_HYDRA_FLAGS = ("-m", "--multirun", "--help", "-h", "--hydra-help", "--cfg", "-c", "--info",
                "--resolve", "--package", "-p", "--shell-completion", "-sc", "--version",
                "--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd",
                "--experimental-rerun")
_VERSIONED = ("torch", "transformers", "tokenizers", "hydra-core", "omegaconf", "numpy",
              "pandas", "pyarrow", "wandb", "reasoning-gym", "vllm", "trl")


def config_exit(message: str) -> None:
    print(f"config error: {message}", file=sys.stderr)
    sys.exit(EXIT_CONFIG)


def preflight(overrides: list[str]) -> None:
    """Compose and validate before Hydra creates anything on disk."""
    from hydra import compose, initialize_config_dir

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
        validate(cfg)
    except ConfigError as e:
        config_exit(str(e))
    except Exception as e:  # Hydra's own errors: unknown group option, typo'd key, bad syntax
        config_exit(_hydra_message(str(e)))


def _hydra_message(text: str) -> str:
    """Hydra's multi-line errors as one line that starts with the key."""
    text = " ".join(text.split("Config search path")[0].split())
    missing = re.search(r"Could not find '([\w/]+)/([^']+)'.*?Available options in '[\w/]+': (.*)", text)
    if missing:
        group, option, choices = missing.groups()
        return f"{group.replace('/', '.')}: unknown option {option!r}; choose one of: {choices.strip()}"
    typo = re.search(r"Could not override '([^']+)'", text)
    if typo:
        return f"{typo.group(1)}: no such key; check the spelling (`--cfg job` lists every key)"
    return text


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=CONF_DIR.parent, capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _versions() -> dict[str, str]:
    found = {}
    for name in _VERSIONED:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def prepare_run_dir(cfg: Config, run_dir: Path) -> str:
    """'fresh', 'resume' or 'skip'. Never deletes data: overwrite moves the old dir aside."""
    from src.telemetry import read_status

    status = read_status(run_dir)
    has_data = (run_dir / "metrics.jsonl").exists() or (run_dir / "checkpoints").exists()
    if cfg.overwrite and has_data:
        aside = run_dir.with_name(f"{run_dir.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
        shutil.move(str(run_dir), aside)
        print(f"overwrite=true: moved the old run dir to {aside}")
        run_dir.mkdir(parents=True, exist_ok=True)
        return "fresh"
    if status and status.get("status") == "finished":
        return "skip"
    if has_data and cfg.resume == "false":
        config_exit(f"resume=false but {run_dir} holds an unfinished run; pass resume=true to "
                    "continue it or overwrite=true to move it aside and start fresh")
    return "resume" if has_data else "fresh"


def execute(cfg: Config, run_dir: Path) -> str:
    import torch

    from src.build import (
        build_backend,
        build_evaluator,
        build_model,
        build_optimizer,
        build_task,
        pick_device,
        prompt_formatter,
    )
    from src.checkpoint import TrainState, load_latest, restore
    from src.telemetry import RunWriter, now_iso
    from src.trainer import NumericFault, Trainer

    mode = prepare_run_dir(cfg, run_dir)
    if mode == "skip":
        print(f"{run_dir} already finished; skipping (overwrite=true reruns it)")
        return "skipped"
    torch.set_num_threads(cfg.train.threads)
    torch.manual_seed(cfg.seed)
    device = pick_device(cfg.device)
    progress = cfg.logger.progress
    task = build_task(cfg)
    model, tokenizer, info = build_model(cfg, task, device, progress)
    optimizer, scheduler = build_optimizer(cfg, model)
    payload, notes = load_latest(run_dir / "checkpoints") if mode == "resume" else (None, [])
    for note in notes:
        print(note)
    if payload is not None:
        state = restore(payload, model, optimizer, scheduler)
        print(f"resuming {run_dir} at step {state.step} from its last checkpoint")
    else:
        state = TrainState(task_position=int(info.get("next_train_index", 0)))
    config_dict = to_container(cfg)
    wandb_run = None
    if cfg.logger.backend == "wandb":
        import wandb

        wandb_run = wandb.init(project=cfg.logger.project, dir=str(run_dir), config=config_dict,
                               name=f"{cfg.experiment.name}-{cfg.method.name}-seed{cfg.seed}",
                               mode=cfg.logger.mode or os.environ.get("WANDB_MODE", "offline"))
    started = now_iso()
    meta = {"git_commit": _git_commit(), "versions": _versions(), "device": str(device),
            "cpu": platform.processor() or platform.machine(), "threads": cfg.train.threads,
            "start_time": started, "method": cfg.method.name, "experiment": cfg.experiment.name,
            "staleness": cfg.train.staleness,
            "staleness_mode": cfg.train.staleness_mode, "seed": cfg.seed, "warm_start": info.get("path"),
            "resumed_at_step": state.step if payload is not None else None}
    writer = RunWriter(run_dir, config_dict, meta, wandb_run=wandb_run,
                       resume_at_step=state.step if payload is not None else -1)
    writer.last_step = state.step - 1 if state.step else None
    writer.set_status("running")
    format_prompt = prompt_formatter(cfg, tokenizer)
    backend = build_backend(cfg, model, tokenizer)
    try:
        trainer = Trainer(cfg, model, tokenizer, task, backend, optimizer, scheduler, writer,
                          run_dir / "checkpoints",
                          evaluate=build_evaluator(cfg, model, tokenizer, task, format_prompt,
                                                   backend=backend),
                          format_prompt=format_prompt)
        try:
            state = trainer.run(state, progress=progress)
        except NumericFault as e:
            writer.set_status("failed", error=str(e))
            writer.close()
            print(f"numeric fault: {e}", file=sys.stderr)
            sys.exit(EXIT_NUMERIC)
        except BaseException as e:
            writer.set_status("failed", error=f"{type(e).__name__}: {e}")
            writer.close()
            raise
    finally:
        backend.close()  # frees the vLLM engine (and its optimizer hook) however the run ends
    meta.update(end_time=now_iso(), wall_time_s=round(state.wall_time_s, 2),
                skipped_updates=state.skipped_updates)
    writer.write_meta(meta)
    writer.set_status("finished")
    writer.close()
    print(f"finished: {run_dir}")
    return "finished"


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def hydra_main(raw: DictConfig) -> str:
    try:
        cfg = validate(raw)
    except ConfigError as e:
        config_exit(str(e))
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        return execute(cfg, run_dir)
    except SystemExit:
        raise
    except Exception:
        traceback.print_exc()
        sys.exit(1)


def main() -> None:
    args = sys.argv[1:]
    if not any(a.split("=")[0] in _HYDRA_FLAGS for a in args):
        preflight([a for a in args if not a.startswith("hydra.")])
    hydra_main()


if __name__ == "__main__":
    main()
