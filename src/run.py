"""Entry point: `python -m src.run experiment=staleness_4x method=bapo`.

Config problems exit with code 2 and one line naming the key, before Hydra makes a run
dir (src/preflight.py checks every job of a multirun first). A finished run dir is
skipped and an unfinished one resumes from its last checkpoint, but only when it was made
with the same config (src/run_dir.py). A run ends with a summary of its numbers.

Run as a program it pins the numerics first, before torch loads (src/pinning.py); imported,
it pins nothing until a job starts (`hydra_main`, which a launcher's worker runs too).
"""

from __future__ import annotations

import os
import platform
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from src.pinning import pin_process

if __name__ == "__main__":
    pin_process()

import hydra  # noqa: E402 - after the pins, as everything that may load torch
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

import src.compose  # noqa: E402, F401 - every registry loaded, the defaults given to Hydra
from src._wait_policy import CHOICE as WAIT_CHOICE  # noqa: E402
from src.config import Config, ConfigError, to_container, validate  # noqa: E402
from src.config_fields import config_exit  # noqa: E402
from src.run_dir import register_resolver  # noqa: E402

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
register_resolver()  # ${run_tag:...} in conf/config.yaml's run dir
EXIT_NUMERIC = 3
EXIT_INTERRUPTED = 130  # the shell's code for Ctrl-C
_HYDRA_INFO_FLAGS = ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "--resolve",
                     "--package", "-p", "--shell-completion", "-sc", "--version",
                     "--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd",
                     "--experimental-rerun")
_VERSIONED = ("torch", "transformers", "tokenizers", "hydra-core", "omegaconf", "numpy",
              "pandas", "pyarrow", "wandb", "vllm", "trl")
# The jobs preflight composed and validated, (composed values, Config) each, for the jobs
# Hydra then starts in this process: each validated once, not again in `hydra_main`.
_CHECKED: list[tuple[dict, Config]] = []


def preflight(args: list[str]) -> None:
    """Compose and check every job before Hydra creates anything on disk."""
    from src.preflight import MULTIRUN_FLAGS, check_run

    multirun = any(a in MULTIRUN_FLAGS for a in args)
    try:
        checked = check_run([a for a in args if a not in MULTIRUN_FLAGS], multirun)
    except ConfigError as e:
        config_exit(str(e))
    _CHECKED[:] = [(_values(raw), cfg) for raw, cfg in checked]


def _values(raw: DictConfig) -> dict | None:
    """A composed config's values without Hydra's own section, resolved (None if they do not
    resolve: `validate` then says why)."""
    plain = OmegaConf.masked_copy(raw, [k for k in raw if k != "hydra"]) if "hydra" in raw else raw
    try:
        return OmegaConf.to_container(plain, resolve=True)
    except Exception:  # an interpolation that fails: validate names its key
        return None


def checked_config(raw: DictConfig) -> Config:
    """The job's Config: the one preflight validated from the same composed values (each job
    of a run or a multirun Hydra starts in this process), else validated here (a launcher's
    worker process, a sweep script's job)."""
    values = _values(raw)
    for i, (checked, cfg) in enumerate(_CHECKED):
        if values is not None and checked == values:
            del _CHECKED[i]
            return cfg
    return validate(raw)


def execute(cfg: Config, run_dir: Path, overrides: list[str] | None = None,
            observe: Callable | None = None) -> str:
    """Run (or skip, or resume) one run in `run_dir`; `overrides` are recorded in meta.json.
    `observe(parts, state)`: called once the trainer is built and the state restored, before
    the loop (src/microscope/ attaches its branches there); it changes nothing the run writes.

    The run dir's lifecycle (src/lifecycle.py) decides fresh / resume / skip, with the dir's
    lock held from before anything is read until the end, so a second process on the same
    dir exits 2 naming the holder.
    """
    from src.lifecycle import display_path, open_run_dir

    try:
        life = open_run_dir(cfg, run_dir)
    except ConfigError as e:
        config_exit(str(e))
    with life:
        if life.mode == "skip":
            print(f"{display_path(run_dir)} already finished; skipping (overwrite=true reruns it)")
            print(life.summary())
            return "skipped"
        return _train(cfg, run_dir, overrides, life, observe)


def _train(cfg: Config, run_dir: Path, overrides: list[str] | None, life,
           observe: Callable | None = None) -> str:
    """A fresh or resumed run in its locked run dir: the parts, the writer, the loop, the end."""
    from src.build import attach_trainer, build_parts
    from src.checkpoint import load_latest, prune_finished, restore
    from src.run_vocab import now_iso
    from src.telemetry import RunWriter

    parts = build_parts(cfg)  # torch's threads and seed, the task, the model, the optimizer
    payload, notes = load_latest(run_dir / "checkpoints") if life.mode == "resume" else (None, [])
    for note in notes:
        print(note)
    if payload is not None:
        state = restore(payload, parts.model, parts.optimizer, parts.scheduler)
        print(f"resuming {run_dir} at step {state.step} from its last checkpoint")
    else:
        state = parts.fresh_state()
    config_dict = to_container(cfg)
    wandb_run = _wandb_run(cfg, run_dir, config_dict) if cfg.logger.backend == "wandb" else None
    meta = _meta(cfg, parts, resumed_at=state.step if payload is not None else None,
                 overrides=overrides)
    writer = RunWriter(run_dir, config_dict, meta, wandb_run=wandb_run,
                       resume_at_step=state.step if payload is not None else -1)
    writer.last_step = state.step - 1 if state.step else None
    writer.set_status("running")
    trainer = attach_trainer(parts, writer, run_dir / "checkpoints")  # backend, evals, Trainer
    try:
        if payload is not None:  # the data in flight: a delay queue, a replay buffer
            trainer.load_schedule_state(payload.get("schedule"))
        if observe is not None:
            observe(parts, state)
        state = _loop(trainer, state, writer, parts.evaluate, life, steps=cfg.train.steps,
                      progress=cfg.logger.progress, resumed=payload is not None)
    finally:
        parts.backend.close()  # frees the vLLM engine (and its optimizer hook) however the run ends
    meta.update(end_time=now_iso(), wall_time_s=round(state.wall_time_s, 2),
                skipped_updates=state.skipped_updates)
    writer.write_meta(meta)
    writer.set_status("finished")
    writer.close()
    prune_finished(run_dir / "checkpoints", keep_final=cfg.checkpoint.keep_final)
    print(life.summary())
    return "finished"


def _loop(trainer, state, writer, evaluate, life, *, steps: int, progress: bool, resumed: bool):
    """The trainer's loop; a numeric fault marks the run failed and exits 3, anything else
    marks it failed and goes on up. A resumed run that reached its end (`train.steps`) redoes
    a lost final eval."""
    from src.trainer import NumericFault

    try:
        state = trainer.run(state, progress=progress)
        if resumed and state.step == steps and life.final_eval_lost(steps):
            writer.log_eval(evaluate(steps))
    except NumericFault as e:
        writer.set_status("failed", error=str(e))
        writer.close()
        print(f"numeric fault: {e}", file=sys.stderr)
        sys.exit(EXIT_NUMERIC)
    except BaseException as e:
        writer.set_status("failed", error=f"{type(e).__name__}: {e}")
        writer.close()
        raise
    return state


def _wandb_run(cfg: Config, run_dir: Path, config_dict: dict):
    """The wandb run of `logger.backend=wandb`: seeds of one cell share a group (the dashboard
    pools them); job_type is the sweep (experiments/run_sweep.py sets REPRO_SWEEP), and the
    tags name both."""
    import wandb

    cell = f"{cfg.experiment.name}/{cfg.method.name}"
    if run_dir.name == f"seed{cfg.seed}" and run_dir.parent.name != cfg.method.name:
        cell += f"/{run_dir.parent.name}"  # the dir level of the overrides
    sweep = os.environ.get("REPRO_SWEEP") or "single"
    return wandb.init(project=cfg.logger.project, dir=str(run_dir), config=config_dict,
                      name=f"{cfg.experiment.name}-{cfg.method.name}-seed{cfg.seed}",
                      group=cell[:128], job_type=sweep[:64],
                      tags=[f"sweep:{sweep}"[:64], cfg.experiment.name[:64],
                            cfg.method.name[:64], f"seed{cfg.seed}"],
                      mode=cfg.logger.mode or os.environ.get("WANDB_MODE", "offline"))


def _meta(cfg: Config, parts, *, resumed_at: int | None, overrides: list[str] | None) -> dict:
    """meta.json: versions, device, the run's labels, the numerics fingerprint, the warm start."""
    from src._numerics import fingerprint as numerics_fingerprint
    from src.run_vocab import run_meta

    return run_meta(versioned=_VERSIONED, device=parts.device, method=cfg.method.name,
                    experiment=cfg.experiment.name, staleness=cfg.train.staleness, seed=cfg.seed,
                    resumed_at_step=resumed_at,
                    cpu=platform.processor() or platform.machine(), threads=cfg.train.threads,
                    numerics=numerics_fingerprint(threads=cfg.train.threads),
                    omp_wait=dict(WAIT_CHOICE), staleness_mode=cfg.train.staleness_mode,
                    warm_start=parts.info.get("path"),
                    warm_start_weights=parts.info.get("weights_sha256"),
                    overrides=list(overrides) if overrides is not None else None)


# An absolute path: Hydra finds conf/ whether this runs as `python -m src.run` or in-process.
@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def hydra_main(raw: DictConfig) -> str:
    pin_process()  # a launcher's worker process (joblib, submitit): as its import pinned before
    try:
        cfg = checked_config(raw)
    except ConfigError as e:
        config_exit(str(e))
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    try:
        return execute(cfg, run_dir, overrides=list(hydra_cfg.overrides.task))
    except SystemExit:
        raise
    except Exception:
        traceback.print_exc()
        sys.exit(1)


def warn_if_invalid(args: list[str]) -> None:
    """`--cfg job` runs nothing, but a config it prints should not look runnable when it is
    not: check it as a run would and say so in one warning line (the exit code stays 0)."""
    from src.preflight import MULTIRUN_FLAGS, check_run

    valued = ("--cfg", "-c", "--package", "-p")
    overrides = [a for i, a in enumerate(args) if not a.startswith("-")
                 and not (i and args[i - 1] in valued)]
    try:
        check_run(overrides, any(a in MULTIRUN_FLAGS for a in args))
    except ConfigError as e:
        print(f"warning: this config would not run: config error: {e}", file=sys.stderr)


def main() -> None:
    args = sys.argv[1:]
    flags = {a.split("=")[0] for a in args}
    try:
        # --help, --cfg and friends run nothing; -m/--multirun is checked job by job.
        if not flags & set(_HYDRA_INFO_FLAGS):
            preflight(args)
        elif flags & {"--cfg", "-c"} and not flags & {"--help", "-h", "--hydra-help", "--info"}:
            warn_if_invalid(args)
        hydra_main()
    except KeyboardInterrupt:
        # One line instead of the traceback: the run dir keeps its checkpoints and the
        # same command (resume=auto) continues from the last one.
        print("\ninterrupted: run the same command again to resume from the last checkpoint",
              file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
    main()
