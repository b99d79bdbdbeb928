"""Run one of the sweeps in experiments/sweeps.yaml as Hydra multiruns, on one core or many.

    python experiments/run_sweep.py main [--dry-run] [extra overrides]
    python experiments/run_sweep.py main --launcher joblib --workers 2 --threads 1
    python experiments/run_sweep.py main --launcher submitit_slurm hydra.launcher.partition=cpu
    python experiments/run_sweep.py testbed_grid --part 6 --launcher joblib --workers 2 --threads 1

A sweep is a `grid` (one multirun over its product) or `parts`, a list of grids run in
order, one multirun each, for a sweep that is no single product (a 1x control beside a
4x grid). `--part N` (1-based, repeatable) runs only those parts: a part whose runs were
exported and committed need not be rerun where runs/ does not hold it. Runs go to runs/<experiment>/<method>/seed<N>/ (extra overrides that change the
numbers add a dir level naming them); finished ones are skipped, unfinished ones resume, in
both cases only if made with the same config. Every job of every part is checked before the
first starts (src/preflight.py), whatever the launcher.

Launchers (Hydra's; chosen in one place, `--launcher` or `hydra/launcher=...` passed through):
- basic (default): the runs one after another in one process per part;
- joblib: `--workers` local worker processes (conf/hydra/launcher/local_joblib.yaml);
- submitit_local: submitit's local executor, `--workers` runs at a time
  (conf/hydra/launcher/local_submitit.yaml);
- submitit_slurm: one SLURM job per run; partition, time, CPUs and memory in
  conf/hydra/launcher/slurm.yaml (docs/scale_out.md).
Each run uses `train.threads` threads (`--threads N` sets it; it is part of the run dir,
since another thread count can change the last bits). On 2 cores two 1-thread workers gave
about 1.2x the throughput of one 2-thread process (benchmarks/README.md).

A failed run does not stop the others: each job returns its status instead of raising, the
sweep prints which run of how many ended how (finished, skipped, failed) with an estimate
of the time left, and its closing summary names every failed run. Exit code 0 when every
run finished (or was already finished), 1 when some failed or did not run, 2 with one
`config error:` line, as `python -m src.run`, for bad input found before anything started:
an unknown sweep, a malformed sweeps.yaml entry, a bad --launcher/--workers, a job's config.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:  # `python experiments/run_sweep.py` puts only experiments/ there
    sys.path.insert(0, str(REPO))

from src.pinning import pin_process  # noqa: E402

pin_process()  # before torch loads, here and (inherited) in every run this sweep starts

from src.config_fields import config_exit  # noqa: E402 - exit 2 and one line, as src/run.py
from src.run_dir import override_value, register_resolver  # noqa: E402

register_resolver()  # ${run_tag:...} in the sweep subdir, in every process that unpickles a job

EXIT_FAILED = 1  # some run failed or did not run
# The launcher names of --launcher -> the option of conf/hydra/launcher/ they select.
LAUNCHERS = {"basic": "basic", "joblib": "local_joblib", "submitit_local": "local_submitit",
             "submitit_slurm": "slurm"}
# Set for the jobs by the sweep (environment, so it reaches worker processes and SLURM jobs):
ENV_SWEEP = "REPRO_SWEEP"  # the sweep's name: wandb's job_type and a tag (src/run.py)
ENV_EVENTS = "REPRO_SWEEP_EVENTS"  # a folder where each job drops its start and end events
POLL_S = 2.0


# What a sweep's claims are judged on, declared in sweeps.yaml before it runs; the reports
# show the other accuracy metric beside it (analysis/claims/).
PRIMARY_METRICS = ("greedy_accuracy", "sampled_accuracy", "entropy_drift",
                   "per_claim")  # per_claim: a microscope study, each claim row names its metric
# A sweep with `entry: microscope` is an update-microscope study (docs/microscope.md): its
# grids are the trunks' overrides, run by experiments/microscope/run_study.py.
MICROSCOPE = "microscope"


def load_sweeps() -> dict[str, Any]:
    return yaml.safe_load((HERE / "sweeps.yaml").read_text())


def sweep_grids(name: str, sweeps: dict[str, Any] | None = None) -> list[dict[str, list]]:
    """The grids of sweep `name`, in the order they run: its `grid`, or each of its `parts`."""
    sweeps = load_sweeps() if sweeps is None else sweeps
    if name not in sweeps:
        config_exit(f"unknown sweep {name!r}; choose one of {sorted(sweeps)} or all")
    entry = sweeps[name]
    if ("grid" in entry) == ("parts" in entry):
        config_exit(f"sweeps.yaml: sweep {name!r} needs exactly one of `grid` (one "
                    "multirun) or `parts` (a list of grids, run in order)")
    grids = [entry["grid"]] if "grid" in entry else entry["parts"]
    if not isinstance(grids, list) or not grids or not all(isinstance(g, dict) and g for g in grids):
        config_exit(f"sweeps.yaml: sweep {name!r}: `parts` must be a non-empty list of "
                    "grids, each a mapping of override key -> list of values")
    if entry.get("primary_metric") not in PRIMARY_METRICS:
        config_exit(f"sweeps.yaml: sweep {name!r}: primary_metric must be one of "
                    f"{', '.join(PRIMARY_METRICS)} (the metric its claims are judged on, fixed "
                    f"before it runs), got {entry.get('primary_metric')!r}")
    return grids


def grid_overrides(grid: dict[str, list]) -> list[str]:
    """`key=v1,v2` per key, in the grid's order (Hydra runs the first key outermost)."""
    return [f"{key}={','.join(map(override_value, values))}" for key, values in grid.items()]


def sweep_commands(name: str, extra: list[str],
                   parts: list[int] | None = None) -> list[list[str]]:
    """One `python -m src.run -m ...` multirun per grid of the sweep (what each part runs;
    `launch_command` runs the same jobs through the sweep's job wrapper); `parts` (1-based)
    keeps only those parts, in the sweep's order."""
    grids = sweep_grids(name)
    if load_sweeps()[name].get("entry") == MICROSCOPE:
        config_exit(f"sweep {name!r} is an update-microscope study: run it with "
                    f"python experiments/microscope/run_study.py {name}")
    chosen = sorted(set(parts)) if parts else list(range(1, len(grids) + 1))
    if bad := [n for n in chosen if not 1 <= n <= len(grids)]:
        config_exit(f"--part {bad[0]}: sweep {name!r} has parts 1-{len(grids)} "
                    "(experiments/sweeps.yaml); pick from those")
    return [[sys.executable, "-m", "src.run", "-m", *grid_overrides(grids[n - 1]), *extra]
            for n in chosen]


def launch_command(cmd: list[str]) -> list[str]:
    """The multirun `cmd` (`python -m src.run -m ...`) with this module's task function,
    which runs each job as src/run.py does but returns a failure instead of raising it."""
    return [sys.executable, "-m", "experiments.run_sweep", "_job", "-m", *cmd[4:]]


def check_all(commands: list[list[str]]) -> None:
    """Every job of every command composed and checked (src/preflight.py) before any runs:
    a bad part 2 must not surface hours after part 1 started."""
    from src.config import ConfigError
    from src.preflight import check_run

    with contextlib.chdir(REPO):  # run dirs are relative to where the runs start
        try:
            for cmd in commands:
                check_run(cmd[4:], multirun=True)
        except ConfigError as e:
            config_exit(str(e))


# -- launchers ---------------------------------------------------------------------------


@dataclass
class Launch:
    kind: str  # basic | joblib | submitit_local | submitit_slurm | other
    workers: int  # runs at a time (for the estimate of the time left)
    overrides: list[str]  # what the sweep adds to every part's command


def choose_launcher(launcher: str | None, workers: int | None, threads: int | None,
                    extra: list[str]) -> Launch:
    """`--launcher`/`--workers`/`--threads` and the passed-through overrides -> the launch.

    One place: `--launcher` or `hydra/launcher=...`, not both. Parallel local launchers get
    `logger.progress=false` (interleaved progress bars from several processes are noise; the
    sweep prints its own progress) unless the overrides set it.
    """
    passed = [a for a in extra if a.split("=")[0] == "hydra/launcher"]
    if launcher and passed:
        config_exit(f"choose the launcher in one place: --launcher {launcher} or {passed[0]}")
    added: list[str] = []
    if launcher:
        added.append(f"hydra/launcher={LAUNCHERS[launcher]}")
    option = (added or passed or ["hydra/launcher=basic"])[0].split("=", 1)[1]
    kind = {v: k for k, v in LAUNCHERS.items()}.get(option)
    if kind is None:  # a launcher option of its own (the plugins' `joblib`, ray, ...)
        target = _launcher_target(extra)
        kind = next((k for k, t in (("joblib", "Joblib"), ("submitit_local", "LocalLauncher"),
                                    ("submitit_slurm", "SlurmLauncher"), ("basic", "BasicLauncher"))
                     if t in target), "other")
    if workers is not None:
        if workers < 1:
            config_exit(f"--workers must be >= 1 (runs at a time), got {workers}")
        key = {"joblib": "hydra.launcher.n_jobs", "submitit_local": "hydra.sweeper.max_batch_size",
               "submitit_slurm": "hydra.launcher.array_parallelism"}.get(kind)
        if key is None:
            config_exit(f"--workers needs a parallel launcher (joblib, submitit_local, "
                        f"submitit_slurm); the {kind} launcher runs one run at a time")
        added.append(f"{key}={workers}")
    if threads is not None:
        added.append(f"train.threads={threads}")
    if kind in ("joblib", "submitit_local", "other") and not any(
            a.startswith("logger.progress=") for a in extra):
        added.append("logger.progress=false")
    n = _launcher_workers(kind, [*extra, *added])
    return Launch(kind, n, added)


def _composed_hydra(overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from src.preflight import CONF_DIR, is_hydra_override

    hydra_args = [a for a in overrides if is_hydra_override(a)]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        raw = compose(config_name="config", overrides=hydra_args, return_hydra_config=True)
    return OmegaConf.to_container(raw.hydra, resolve=False)


def _launcher_target(overrides: list[str]) -> str:
    try:
        return str(_composed_hydra(overrides)["launcher"].get("_target_", ""))
    except Exception:  # the preflight names the problem
        return ""


def _launcher_workers(kind: str, overrides: list[str]) -> int:
    """Runs at a time under this launch (an estimate's input, not a promise)."""
    if kind == "basic":
        return 1
    try:
        hydra_cfg = _composed_hydra(overrides)
    except Exception:
        return 1
    launcher, sweeper = hydra_cfg["launcher"], hydra_cfg.get("sweeper") or {}
    if kind == "joblib":
        n = launcher.get("n_jobs", -1)
        return (os.cpu_count() or 1) if not isinstance(n, int) or n < 1 else n
    batch = sweeper.get("max_batch_size")
    if kind == "submitit_slurm":
        n = launcher.get("array_parallelism")
        batch = min(b for b in (batch, n) if isinstance(b, int)) if isinstance(n, int) else batch
    return batch if isinstance(batch, int) and batch > 0 else 10**6  # all at once


# -- the jobs ----------------------------------------------------------------------------


@dataclass
class Job:
    number: int  # 1-based, over every part
    overrides: list[str]
    run_dir: Path  # absolute
    already_finished: bool


def plan_jobs(commands: list[list[str]]) -> list[Job]:
    """Every job of every part, in launch order, with its run dir (as the preflight sees it)."""
    from hydra import initialize_config_dir

    from src.lifecycle import read_status
    from src.preflight import CONF_DIR, compose_job, expand_sweep, is_hydra_override, job_run_dir

    jobs: list[Job] = []
    with contextlib.chdir(REPO), initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for cmd in commands:
            args = cmd[4:]
            hydra_args = [a for a in args if is_hydra_override(a)]
            for job in expand_sweep([a for a in args if not is_hydra_override(a)]):
                run_dir = (REPO / job_run_dir(compose_job(job + hydra_args), True)).resolve()
                done = (read_status(run_dir) or {}).get("status") == "finished"
                jobs.append(Job(len(jobs) + 1, job, run_dir, done))
    return jobs


def job_key(run_dir: Path | str) -> str:
    return hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()[:16]


def write_event(events: Path, run_dir: Path, kind: str, **fields: Any) -> None:
    """One small file per job and event, written atomically: safe from many processes and
    hosts at once (no shared append)."""
    events.mkdir(parents=True, exist_ok=True)
    path = events / f"{job_key(run_dir)}.{kind}.json"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"run_dir": str(run_dir), "time": time.time(), **fields}))
    os.replace(tmp, path)


def read_events(events: Path) -> dict[str, dict[str, dict]]:
    """{job key: {"start": event, "end": event}}."""
    out: dict[str, dict[str, dict]] = {}
    for path in events.glob("*.json") if events.is_dir() else []:
        key, kind, _ = path.name.split(".", 2)
        with contextlib.suppress(OSError, ValueError):
            out.setdefault(key, {})[kind] = json.loads(path.read_text())
    return out


def run_job_safely(raw) -> dict:
    """Hydra task function of the sweep: src/run.py's job, with its failure returned, not
    raised, so that one failed run never stops the others (Hydra's sweepers stop at the
    first job that raises). Runs in the launcher's worker process."""
    from hydra.core.hydra_config import HydraConfig

    from src.lifecycle import read_status
    from src.run import hydra_main

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    events = Path(os.environ[ENV_EVENTS]) if os.environ.get(ENV_EVENTS) else None
    t0 = time.time()
    if events is not None:
        with contextlib.suppress(OSError):
            write_event(events, run_dir, "start", pid=os.getpid(), host=os.uname().nodename)
    status, error = "failed", None
    try:
        result = hydra_main.__wrapped__(raw)  # src/run.py's job as `python -m src.run` runs it
        status = result if result in ("finished", "skipped") else "finished"
    except SystemExit as e:  # src/run.py exits 2 (config), 3 (numeric fault), 1 (any other)
        code = e.code if isinstance(e.code, int) else 1
        if code == 0:
            status = "finished"
        else:
            error = (read_status(run_dir) or {}).get("error") or f"exit code {code}"
    except Exception as e:  # src/run.py turns these into exit 1; kept in case it stops doing so
        import traceback

        traceback.print_exc()
        error = f"{type(e).__name__}: {e}"
    log = _job_log()
    record = {"run_dir": str(run_dir), "status": status, "error": error,
              "seconds": round(time.time() - t0, 2), "log": log}
    if events is not None:
        with contextlib.suppress(OSError):  # progress is a view; the run dir is the record
            write_event(events, run_dir, "end", **{k: v for k, v in record.items() if k != "run_dir"})
    return record


def _job_log() -> str | None:
    """Where this job's output went, when a launcher sent it to a file (submitit)."""
    if not os.environ.get("SUBMITIT_EXECUTOR"):
        return None
    with contextlib.suppress(Exception):
        import submitit

        return str(submitit.JobEnvironment().paths.stderr)
    return None


def _hydra_job() -> None:
    """`python -m experiments.run_sweep _job -m ...`: the multirun of one part."""
    import hydra

    from src.run import CONF_DIR

    sys.argv = [sys.argv[0], *sys.argv[2:]]
    hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")(run_job_safely)()


# -- progress ----------------------------------------------------------------------------


@dataclass
class Progress:
    """The sweep's view of its jobs from their events: which run of how many ended how, and
    an estimate of the time left from the runs that finished (mean time per run x runs left,
    over the runs that go at once)."""

    name: str
    jobs: list[Job]
    events: Path
    workers: int
    started: float = field(default_factory=time.time)
    reported: set[str] = field(default_factory=set)
    out: Any = None

    def __post_init__(self) -> None:
        self.by_key = {job_key(j.run_dir): j for j in self.jobs}
        self.out = self.out or sys.stdout

    def states(self, seen: dict | None = None, at: float = math.inf) -> dict[str, str]:
        """{job key: queued | running | finished | skipped | failed} as of time `at` (the
        events' own clock), from the events `seen` (default: read them now)."""
        seen = read_events(self.events) if seen is None else seen
        out = {}
        for key in self.by_key:
            ev = seen.get(key, {})
            if "end" in ev and ev["end"]["time"] <= at:
                out[key] = ev["end"]["status"]
            else:
                out[key] = "running" if "start" in ev and ev["start"]["time"] <= at else "queued"
        return out

    def counts(self, states: dict[str, str]) -> dict[str, int]:
        return {s: sum(v == s for v in states.values())
                for s in ("finished", "skipped", "failed", "running", "queued")}

    def time_left_s(self, states: dict[str, str], seen: dict | None = None) -> float | None:
        seen = read_events(self.events) if seen is None else seen
        took = [seen[k]["end"]["seconds"] for k, s in states.items() if s == "finished"]
        if not took:
            return None
        c = self.counts(states)
        at_once = max(1, min(self.workers, c["running"] + c["queued"]))
        # queued runs that are already finished will be skipped in no time
        queued = sum(1 for k, s in states.items() if s == "queued" and not self.by_key[k].already_finished)
        return sum(took) / len(took) * (queued + c["running"] / 2) / at_once

    def poll(self) -> None:
        """One line per run that ended since the last poll, in the order they ended, each
        with the counts and the estimate as they stood when it ended (so the lines do not
        depend on how often the sweep looks)."""
        seen = read_events(self.events)
        ended = sorted((ev["end"]["time"], key) for key, ev in seen.items()
                       if "end" in ev and key in self.by_key and key not in self.reported)
        for when, key in ended:
            self.reported.add(key)
            states = self.states(seen, at=when)
            state = states[key]
            job, end = self.by_key[key], seen[key]["end"]
            c = self.counts(states)
            done = c["finished"] + c["skipped"] + c["failed"]
            left = self.time_left_s(states, seen)
            eta = f"; about {format_duration(left)} left" if left is not None and done < len(self.jobs) else ""
            how = f"{state} in {end['seconds']:.0f} s" if state != "skipped" else "skipped (finished before)"
            why = f": {end['error']}" if state == "failed" and end.get("error") else ""
            print(f"[sweep {self.name}] run {job.number}/{len(self.jobs)} {how}: "
                  f"{display(job.run_dir)}{why} | {done}/{len(self.jobs)} done ({c['finished']} "
                  f"finished, {c['skipped']} skipped, {c['failed']} failed), {c['running']} "
                  f"running{eta}", file=self.out, flush=True)

    def summary(self) -> tuple[list[str], int]:
        """Closing lines and the exit code: the failed runs by name, and those that never ran."""
        states = self.states()
        seen = read_events(self.events)
        c = self.counts(states)
        not_run = [self.by_key[k] for k, s in states.items() if s in ("queued", "running")]
        failed = [self.by_key[k] for k, s in states.items() if s == "failed"]
        lines = [f"sweep {self.name}: {len(self.jobs)} runs in {format_duration(time.time() - self.started)}: "
                 f"{c['finished']} finished, {c['skipped']} skipped (finished before), "
                 f"{c['failed']} failed" + (f", {len(not_run)} did not run or end" if not_run else "")]
        for job in failed:
            end = seen[job_key(job.run_dir)]["end"]
            log = f" (log: {end['log']})" if end.get("log") else ""
            lines.append(f"  failed: {display(job.run_dir)}: {end.get('error')}{log}")
        for job in not_run:
            lines.append(f"  did not end: {display(job.run_dir)} ({' '.join(job.overrides)})")
        if failed or not_run:
            lines.append("  rerun the same command: finished runs are skipped, unfinished ones "
                         "resume from their last checkpoint")
        return lines, EXIT_FAILED if failed or not_run else 0


def display(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.relative_to(REPO))
    return str(path)


def format_duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def run_sweep(name: str, commands: list[list[str]], launch: Launch, out=None) -> int:
    """Launch every part (one multirun each) and report progress; the exit code."""
    out = out or sys.stdout
    jobs = plan_jobs(commands)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    # Hydra's sweep.dir (runs/ by default) holds the events, where every job can reach them
    events = _sweep_root(commands[0]) / ".sweeps" / f"{name}-{stamp}-{os.getpid()}"
    progress = Progress(name, jobs, events, launch.workers, out=out)
    before = sum(j.already_finished for j in jobs)
    print(f"[sweep {name}] {len(jobs)} runs in {len(commands)} part(s) ({before} finished before, "
          f"skipped), launcher {launch.kind}, {min(launch.workers, len(jobs))} at a time; "
          f"progress events in {display(events)}", file=out, flush=True)
    env = dict(os.environ, **{ENV_SWEEP: name, ENV_EVENTS: str(events)})
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(POLL_S):
            progress.poll()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    codes = []
    try:
        for cmd in commands:
            full = launch_command(cmd)
            print("$", " ".join(full), file=out, flush=True)
            codes.append(subprocess.run(full, cwd=REPO, env=env).returncode)
    finally:
        stop.set()
        watcher.join()
    progress.poll()
    lines, code = progress.summary()
    for part, rc in enumerate(codes, 1):
        if rc != 0:  # the launcher itself failed (a killed worker, a SLURM job lost)
            lines.append(f"  part {part}'s launcher exited with code {rc}; see its output above")
            code = EXIT_FAILED
    print("\n".join(lines), file=out, flush=True)
    return code


def _sweep_root(cmd: list[str]) -> Path:
    with contextlib.chdir(REPO):
        try:
            sweep_dir = _composed_hydra(cmd[4:])["sweep"]["dir"]
        except Exception:
            sweep_dir = "runs"
    return (REPO / str(sweep_dir)).resolve()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_job"]:
        _hydra_job()
        return 0
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("sweep", help="a name in sweeps.yaml, or 'all'")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    parser.add_argument("--launcher", choices=sorted(LAUNCHERS),
                        help="Hydra launcher (default basic: one run at a time); or pass "
                             "hydra/launcher=<option> among the overrides")
    parser.add_argument("--workers", type=int, help="runs at a time (parallel launchers)")
    parser.add_argument("--threads", type=int, help="train.threads of every run (it names a "
                        "dir level: another thread count may change the last bits)")
    parser.add_argument("--part", type=int, action="append", metavar="N",
                        help="run only part N of the sweep (1-based, as listed in "
                             "sweeps.yaml; repeatable); default every part")
    parser.add_argument("extra", nargs="*", help="overrides added to every run")
    args = parser.parse_intermixed_args(argv)
    if args.part and args.sweep == "all":
        config_exit("--part picks parts of one sweep; name the sweep instead of 'all'")
    names = ([n for n, e in load_sweeps().items() if e.get("entry") != MICROSCOPE]
             if args.sweep == "all" else [args.sweep])
    launch = choose_launcher(args.launcher, args.workers, args.threads, args.extra)
    extra = [*args.extra, *launch.overrides]
    commands = [cmd for name in names for cmd in sweep_commands(name, extra, args.part)]
    if args.dry_run:
        for cmd in commands:
            print("$", " ".join(launch_command(cmd)))
        return 0
    local = launch.kind in ("joblib", "submitit_local")
    threads = _threads(extra)
    if local and threads and launch.workers * threads > (os.cpu_count() or 1):
        print(f"note: {launch.workers} workers x {threads} threads > {os.cpu_count()} cores; "
              "--threads 1 (or fewer --workers) avoids oversubscribing them", file=sys.stderr)
    check_all(commands)
    return run_sweep(args.sweep, commands, launch)


def _threads(overrides: list[str]) -> int | None:
    for a in reversed(overrides):
        if a.startswith("train.threads="):
            with contextlib.suppress(ValueError):
                return int(a.split("=", 1)[1])
            return None
    return 2  # conf/config.yaml


if __name__ == "__main__":
    if sys.argv[1:2] == ["_job"]:
        # Import this file under its package name, so that the task function Hydra hands to
        # worker processes is pickled by reference (experiments.run_sweep.run_job_safely).
        from experiments import run_sweep as _module

        _module._hydra_job()
    else:
        sys.exit(main())
