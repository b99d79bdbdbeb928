"""A run dir's lifecycle: its lock, its status, fresh / resume / skip, missing records, summary.

`python -m src.run` asks once, `open_run_dir(cfg, run_dir)`: it takes the dir's lock for the
whole run, refuses a dir made with another config, and decides what the run does there:

- fresh: nothing there yet, or `overwrite=true` moved the old dir aside (never deleted);
- resume: an unfinished run (from its last checkpoint), or a finished one whose final eval
  was lost, with `resume=true`;
- skip: a finished, whole run.

The preflight asks the same questions of every job before Hydra makes a dir
(`check_existing_run`, `check_run_dir_free`). Which config keys make two runs differ, and the
dir's name, are src/run_dir.py's; the writer of the records is src/telemetry.py's.

The lock is `fcntl.flock` on `<run dir>/.lock`: the kernel drops it when its holder exits
however it exits (SIGKILL included), so a killed run leaves no stale lock and the same command
resumes it. The holder writes its pid and host into the file, so a second process can name it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from src.committed import committed_dir_message, placement_lines
from src.config_fields import ConfigError
from src.run_dir import config_differences, mismatch_message, stored_config
from src.run_files import has_metrics, metrics_lines
from src.run_vocab import upgrade_config

if TYPE_CHECKING:
    from src.config import Config

LOCK_NAME = ".lock"


# -- the one question --------------------------------------------------------------------


class Lifecycle:
    """One run's hold on its run dir (the lock, released by `close`) and what it does there."""

    def __init__(self, run_dir: Path, mode: str, lock: RunDirLock):
        self.run_dir, self.mode, self.lock = Path(run_dir), mode, lock

    def final_eval_lost(self, steps: int) -> bool:
        """A run resumed at its final checkpoint because its final eval was lost: eval again
        (same weights and the eval's own seed, so the same record as the lost one)."""
        return missing_records(self.run_dir, steps)[0] is not None

    def summary(self) -> str:
        return "\n".join(summary_lines(self.run_dir))

    def close(self) -> None:
        self.lock.close()

    def __enter__(self) -> Lifecycle:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_run_dir(cfg: Config, run_dir: Path) -> Lifecycle:
    """Lock `run_dir` for this run, then decide fresh / resume / skip (`decide_mode`); raises
    ConfigError (the lock released) when another process holds the dir or it holds a run
    this config may not skip or resume, or lies in committed results (src/committed.py)."""
    refusal = committed_dir_message(run_dir, "hydra.run.dir")
    if refusal:  # before the lock: not even a lock file goes into a committed run
        raise ConfigError(refusal)
    try:
        lock = RunDirLock(run_dir)
    except RunDirBusy as e:
        raise ConfigError(str(e)) from None
    try:
        mode = decide_mode(cfg, Path(run_dir))
        lock.renew()  # overwrite=true moved the old dir aside, its lock file with it
    except BaseException:
        lock.close()
        raise
    return Lifecycle(run_dir, mode, lock)


def decide_mode(cfg: Config, run_dir: Path) -> str:
    """'fresh', 'resume' or 'skip'. Never deletes data: overwrite moves the old dir aside.

    A run dir made with another config (any key that changes the numbers) is never skipped
    or resumed into: that is a ConfigError (`check_existing_run`).
    """
    check_existing_run(cfg, run_dir)
    status = read_status(run_dir)
    has_data = has_metrics(run_dir) or (run_dir / "checkpoints").exists()
    if cfg.overwrite and has_data:
        aside = run_dir.with_name(f"{run_dir.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
        shutil.move(str(run_dir), aside)
        print(f"overwrite=true: moved the old run dir to {aside}")
        run_dir.mkdir(parents=True, exist_ok=True)
        return "fresh"
    if status and status.get("status") == "finished":
        # resume=true on a finished run that lost its final eval (check_existing_run let
        # it through only then): redone from the final checkpoint.
        return "resume" if missing_records(run_dir, cfg.train.steps)[0] else "skip"
    return "resume" if has_data else "fresh"


# -- may this config skip or resume here -------------------------------------------------


def check_existing_run(cfg: Config, run_dir: Path) -> None:
    """Refuse to skip or resume a run dir made with another config (or resume=false)."""
    from src.config import to_container

    run_dir = Path(run_dir)
    has_data = has_metrics(run_dir) or (run_dir / "checkpoints").exists()
    if cfg.overwrite or not has_data:
        return
    stored = stored_config(run_dir)
    if stored is None:
        raise ConfigError(f"hydra.run.dir: {run_dir} holds run data but no readable config.yaml, "
                          "so it cannot be checked; give this run another dir or pass "
                          "overwrite=true to move the old one aside")
    # Today's config through the same upgrade as the stored one: an HF model's empty
    # `model.sft` gets the keys added since on both sides, or no HF run could resume.
    differences = config_differences(stored, upgrade_config(to_container(cfg)))
    if differences:
        raise ConfigError(mismatch_message(run_dir, differences))
    finished = (read_status(run_dir) or {}).get("status") == "finished"
    if finished:
        check_finished_whole(cfg, run_dir)
    if not finished and cfg.resume == "false":
        raise ConfigError(f"resume=false but {run_dir} holds an unfinished run; pass resume=true "
                          "to continue it or overwrite=true to move it aside and start fresh")


def check_finished_whole(cfg: Config, run_dir: Path) -> None:
    """A finished run whose metrics.jsonl lost records is not skipped as if whole: named,
    and redone with resume=true when its final checkpoint covers what was lost."""
    problem, redoable = missing_records(run_dir, cfg.train.steps)
    if problem is None or (redoable and cfg.resume == "true"):
        return
    has_checkpoint = any((run_dir / "checkpoints").glob("step_*.pt"))
    fix = ("pass resume=true to redo the final eval from its last checkpoint, or overwrite=true "
           "to rerun it" if redoable and has_checkpoint else "pass overwrite=true to rerun it")
    raise ConfigError(f"hydra.run.dir: {run_dir} is marked finished but its metrics.jsonl has "
                      f"{problem}; {fix}")


def check_run_dir_free(run_dir: Path) -> None:
    """Refuse a run dir that another process is running in (its lock, below)."""
    try:
        check_unlocked(run_dir)
    except RunDirBusy as e:
        raise ConfigError(str(e)) from None


# -- status and records ------------------------------------------------------------------


def read_status(run_dir: Path) -> dict | None:
    """status.json (running / finished / failed, written by src/telemetry.py `RunWriter`)."""
    path = Path(run_dir) / "status.json"
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def missing_records(run_dir: Path, steps: int) -> tuple[str | None, bool]:
    """What a finished run's metrics.jsonl lacks (a step record of 0..steps-1, the final
    eval at `steps`, or a line cut short), and whether the final eval is all it lacks (the
    final checkpoint can redo that); (None, False) when it is whole."""
    seen_steps, evals, partial = set(), set(), 0
    lines = metrics_lines(run_dir) if has_metrics(run_dir) else []
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            partial += 1
            continue
        if record.get("kind") == "step":
            seen_steps.add(record.get("step"))
        elif record.get("kind") == "eval":
            evals.add(record.get("step"))
    lost = sorted(set(range(steps)) - seen_steps)
    problems = []
    if partial:
        problems.append(f"{partial} line(s) cut short")
    if lost:
        problems.append(f"no step record for step(s) {', '.join(map(str, lost[:5]))}"
                        f"{' ...' if len(lost) > 5 else ''}")
    if steps not in evals:
        problems.append(f"no final eval (step {steps})")
    if not problems:
        return None, False
    return "; ".join(problems), not lost


# -- the summary -------------------------------------------------------------------------


def summary_lines(run_dir: Path, last_k: int = 5) -> list[str]:
    """The end-of-run block: held-out accuracy, reward, wall time, where it is, what next.

    Read back from the run dir, so a resumed or skipped run reports the whole run.
    """
    import yaml

    run_dir = Path(run_dir)
    records = []
    for line in metrics_lines(run_dir) if has_metrics(run_dir) else []:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    steps = [r for r in records if r.get("kind") == "step"]
    evals = [r for r in records if r.get("kind") == "eval"]
    try:
        meta = json.loads((run_dir / "meta.json").read_text())
    except (OSError, json.JSONDecodeError):
        meta = {}
    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        config = {}
    config = config if isinstance(config, dict) else {}
    samples = (config.get("eval") or {}).get("samples")

    lines = [f"finished: {display_path(run_dir)}"]
    experiment = str((config.get("experiment") or {}).get("name") or meta.get("experiment") or "")
    if "smoke" in experiment:
        lines.append(f"  experiment={experiment} is a smoke run: it checks that the pipeline "
                     "runs end to end; its numbers are not results")
    if evals:
        lines += accuracy_lines(evals, samples)
    lines += placement_lines(run_dir)
    if steps:
        tail = [r["reward_mean"] for r in steps[-last_k:] if r.get("reward_mean") is not None]
        if tail:
            over = "the last step" if len(tail) == 1 else f"the last {len(tail)} steps"
            lines.append(f"  final reward: {sum(tail) / len(tail):.3f} (the training rollouts' "
                         f"mean reward, averaged over {over})")
    if meta.get("wall_time_s") is not None:
        lines.append(f"  training wall time: {meta['wall_time_s']:.1f} s")
    lines.append(f"  next: python analysis/make_figures.py --runs {_runs_root(run_dir)}")
    return lines


def accuracy_lines(evals: list[dict], samples: int | None) -> list[str]:
    """Held-out accuracy where the run started (the step-0 eval: the warm start) and where
    it ended, and the change: a run can end below its start, and only the pair shows it."""
    first, last = evals[0], evals[-1]

    def fmt(value: Any) -> str:
        return "    -" if value is None else f"{value:.3f}"

    def change(key: str) -> str:
        a, b = first.get(key), last.get(key)
        return "     -" if a is None or b is None else f"{b - a:+.3f}"

    per = (f", {samples} sample{'' if samples == 1 else 's'} per problem"
           if samples is not None else "")
    lines = [f"  held-out accuracy, {last.get('n_problems')} problems{per}: "
             f"step {first['step']} -> step {last['step']}"]
    for name in ("greedy", "sampled"):
        key = f"{name}_accuracy"
        lines.append(f"    {name:<8} start {fmt(first.get(key))}  end {fmt(last.get(key))}  "
                     f"change {change(key)}")
    lines.append("  one seed: seeds differ more than methods often do, so "
                 "compare methods over seeds, paired by seed (docs/statistics.md)")
    return lines


def display_path(path: Path) -> Path:
    """`path` relative to the working dir when it lies inside it (Hydra passes it absolute)."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path


def _runs_root(run_dir: Path) -> Path:
    """The top dir of a run dir inside the working dir (`runs`), else the run dir itself."""
    shown = display_path(run_dir)
    return Path(shown.parts[0]) if not shown.is_absolute() and shown.parts else shown


# -- the lock ----------------------------------------------------------------------------


class RunDirBusy(RuntimeError):
    """Another process holds the run dir's lock; the message names it."""


def _holder(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except OSError:
        text = ""
    return text or "another process (it has not written its pid yet)"


def lock_run_dir(run_dir: Path):
    """Take the run dir's lock; returns the open lock file (keep it open for the run).

    Raises RunDirBusy naming the holder (pid and host) when another process has it.
    """
    path = Path(run_dir) / LOCK_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 - held open for the whole run
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise RunDirBusy(f"hydra.run.dir: {run_dir} is in use by {_holder(path)}; wait for it "
                         "to end or give this run another dir") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on host {socket.gethostname()}\n")
    handle.flush()
    return handle


def check_unlocked(run_dir: Path) -> None:
    """Raise RunDirBusy if another process holds `run_dir`'s lock (takes nothing)."""
    path = Path(run_dir) / LOCK_NAME
    if not path.exists():
        return
    with open(path) as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirBusy(f"hydra.run.dir: {run_dir} is in use by {_holder(path)}; wait for "
                             "it to end or give this run another dir") from None
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


class RunDirLock:
    """The run dir's lock for one run; `renew()` after the dir was moved aside."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.handle = lock_run_dir(self.run_dir)

    def renew(self) -> None:
        """Lock the dir now at `run_dir` if the locked file went with a moved dir."""
        if not (self.run_dir / LOCK_NAME).exists():
            self.handle.close()
            self.handle = lock_run_dir(self.run_dir)

    def close(self) -> None:
        self.handle.close()
