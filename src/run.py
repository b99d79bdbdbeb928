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
import shutil
import sys
import time
import traceback
from pathlib import Path

from src.pinning import pin_process

if __name__ == "__main__":
    pin_process()

import hydra  # noqa: E402 - after the pins, as everything that may load torch
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

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


def preflight(args: list[str]) -> None:
    """Compose and check every job before Hydra creates anything on disk."""
    from src.preflight import MULTIRUN_FLAGS, check_run

    multirun = any(a in MULTIRUN_FLAGS for a in args)
    try:
        check_run([a for a in args if a not in MULTIRUN_FLAGS], multirun)
    except ConfigError as e:
        config_exit(str(e))


def prepare_run_dir(cfg: Config, run_dir: Path) -> str:
    """'fresh', 'resume' or 'skip'. Never deletes data: overwrite moves the old dir aside.

    A run dir made with another config (any key that changes the numbers) is never skipped
    or resumed into: that is a config error (src/preflight.py).
    """
    from src.preflight import check_existing_run
    from src.telemetry import read_status

    try:
        check_existing_run(cfg, run_dir)
    except ConfigError as e:
        config_exit(str(e))
    status = read_status(run_dir)
    has_data = (run_dir / "metrics.jsonl").exists() or (run_dir / "checkpoints").exists()
    if cfg.overwrite and has_data:
        aside = run_dir.with_name(f"{run_dir.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
        shutil.move(str(run_dir), aside)
        print(f"overwrite=true: moved the old run dir to {aside}")
        run_dir.mkdir(parents=True, exist_ok=True)
        return "fresh"
    if status and status.get("status") == "finished":
        from src.telemetry import missing_records

        # resume=true on a finished run that lost its final eval (check_existing_run let
        # it through only then): redone from the final checkpoint.
        return "resume" if missing_records(run_dir, cfg.train.steps)[0] else "skip"
    return "resume" if has_data else "fresh"


def execute(cfg: Config, run_dir: Path, overrides: list[str] | None = None) -> str:
    """Run (or skip, or resume) one run in `run_dir`; `overrides` are recorded in meta.json.

    The run dir's lock (src/run_lock.py) is held from before anything is read until the
    end, so a second process on the same dir exits 2 naming the holder.
    """
    from src.run_lock import RunDirBusy, RunDirLock

    try:
        lock = RunDirLock(run_dir)
    except RunDirBusy as e:
        config_exit(str(e))
    try:
        return _execute_locked(cfg, run_dir, overrides, lock)
    finally:
        lock.close()


def _execute_locked(cfg: Config, run_dir: Path, overrides: list[str] | None, lock) -> str:
    from src._numerics import fingerprint as numerics_fingerprint
    from src.build import attach_trainer, build_parts
    from src.checkpoint import load_latest, prune_finished, restore
    from src.run_vocab import now_iso, run_meta
    from src.telemetry import RunWriter, display_path, summary_lines
    from src.trainer import NumericFault

    mode = prepare_run_dir(cfg, run_dir)
    lock.renew()  # overwrite=true moved the old dir aside, its lock file with it
    if mode == "skip":
        print(f"{display_path(run_dir)} already finished; skipping (overwrite=true reruns it)")
        print("\n".join(summary_lines(run_dir)))
        return "skipped"
    parts = build_parts(cfg)  # torch's threads and seed, the task, the model, the optimizer
    device, progress, info = parts.device, cfg.logger.progress, parts.info
    payload, notes = load_latest(run_dir / "checkpoints") if mode == "resume" else (None, [])
    for note in notes:
        print(note)
    if payload is not None:
        state = restore(payload, parts.model, parts.optimizer, parts.scheduler)
        print(f"resuming {run_dir} at step {state.step} from its last checkpoint")
    else:
        state = parts.fresh_state()
    config_dict = to_container(cfg)
    wandb_run = None
    if cfg.logger.backend == "wandb":
        import wandb

        # Seeds of one cell share a group (the dashboard pools them); job_type is the sweep
        # (experiments/run_sweep.py sets REPRO_SWEEP), and the tags name both.
        cell = f"{cfg.experiment.name}/{cfg.method.name}"
        if run_dir.name == f"seed{cfg.seed}" and run_dir.parent.name != cfg.method.name:
            cell += f"/{run_dir.parent.name}"  # the dir level of the overrides
        sweep = os.environ.get("REPRO_SWEEP") or "single"
        wandb_run = wandb.init(project=cfg.logger.project, dir=str(run_dir), config=config_dict,
                               name=f"{cfg.experiment.name}-{cfg.method.name}-seed{cfg.seed}",
                               group=cell[:128], job_type=sweep[:64],
                               tags=[f"sweep:{sweep}"[:64], cfg.experiment.name[:64],
                                     cfg.method.name[:64], f"seed{cfg.seed}"],
                               mode=cfg.logger.mode or os.environ.get("WANDB_MODE", "offline"))
    meta = run_meta(versioned=_VERSIONED, device=device, method=cfg.method.name,
                    experiment=cfg.experiment.name, staleness=cfg.train.staleness, seed=cfg.seed,
                    resumed_at_step=state.step if payload is not None else None,
                    cpu=platform.processor() or platform.machine(), threads=cfg.train.threads,
                    numerics=numerics_fingerprint(threads=cfg.train.threads),
                    omp_wait=dict(WAIT_CHOICE), staleness_mode=cfg.train.staleness_mode,
                    warm_start=info.get("path"), warm_start_weights=info.get("weights_sha256"),
                    overrides=list(overrides) if overrides is not None else None)
    writer = RunWriter(run_dir, config_dict, meta, wandb_run=wandb_run,
                       resume_at_step=state.step if payload is not None else -1)
    writer.last_step = state.step - 1 if state.step else None
    writer.set_status("running")
    trainer = attach_trainer(parts, writer, run_dir / "checkpoints")  # backend, evals, Trainer
    backend, evaluate = parts.backend, parts.evaluate
    try:
        if payload is not None:  # the data in flight: a delay queue, a replay buffer
            trainer.load_schedule_state(payload.get("schedule"))
        try:
            state = trainer.run(state, progress=progress)
            if payload is not None and state.step == cfg.train.steps:
                redo_final_eval(run_dir, cfg.train.steps, writer, evaluate)
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
    prune_finished(run_dir / "checkpoints", keep_final=cfg.checkpoint.keep_final)
    print("\n".join(summary_lines(run_dir)))
    return "finished"


def redo_final_eval(run_dir: Path, steps: int, writer, evaluate) -> None:
    """A run resumed at its final checkpoint because its final eval was lost: eval again.
    Same weights and the eval's own seed, so the same record as the lost one."""
    from src.telemetry import missing_records

    if missing_records(run_dir, steps)[0] is not None:
        writer.log_eval(evaluate(steps))


# An absolute path: Hydra finds conf/ whether this runs as `python -m src.run` or in-process.
@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def hydra_main(raw: DictConfig) -> str:
    pin_process()  # a launcher's worker process (joblib, submitit): as its import pinned before
    try:
        cfg = validate(raw)
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
