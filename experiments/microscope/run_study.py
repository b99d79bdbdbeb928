"""Run an update-microscope study of experiments/sweeps.yaml (an entry with `entry: microscope`),
part by part, and export its finished studies lean.

    python experiments/microscope/run_study.py microscope_smol --part 1 --workers 2
    python experiments/microscope/run_study.py microscope_smol --status
    python experiments/microscope/run_study.py microscope_smol --export experiments/microscope/smol

Each job is one trunk (a cell of the part's grid, seed outermost) run by
`python -m src.microscope` with the entry's `microscope` settings, the part's own
(`part_settings`, one mapping or null per part) and `train.threads=1`. Its study dir is
`<--root>/<experiment>/<method>/[<other overrides>/]seed<s>`. A finished study is skipped and an
unfinished one resumes (src/microscope/). Every job is checked before the first starts; a bad
one exits 2 naming it. `--export` copies each finished study's tables and settings, and its
trunk as experiments/export_results.py exports a run (no checkpoints, its metrics.jsonl as
metrics.jsonl.gz), with a 1-in-5 sample of the trunk's token rows.
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from src.config_fields import ConfigError, config_exit  # noqa: E402
from src.run_dir import override_value  # noqa: E402
from src.run_files import has_metrics, metrics_bytes  # noqa: E402

# checkpoint.every changes no number: a trunk stopped with its session loses at most 2 rollouts
FIXED = ["train.threads=1", "logger.progress=false", "checkpoint.every=2"]
TOKEN_FRACTION = 0.2  # the trunk's token rows kept: whole responses, as export_results.py keeps them
STUDY_FILES = ("microscope.yaml", "probes.pt", "branches.parquet", "horizons.parquet")


def _value(v) -> str:
    if isinstance(v, list):
        return "[" + ",".join(f"'{x}'" if isinstance(x, str) else override_value(x) for x in v) + "]"
    return override_value(v)


def study_jobs(name: str, parts: list[int] | None, root: Path) -> list[list[str]]:
    """The `python -m src.microscope` arguments of every job of the chosen parts."""
    from experiments.run_sweep import MICROSCOPE, load_sweeps, sweep_grids

    entry = load_sweeps().get(name) or {}
    if entry.get("entry") != MICROSCOPE:
        config_exit(f"{name!r} is not an update-microscope study in experiments/sweeps.yaml "
                    f"(an entry with `entry: {MICROSCOPE}`)")
    grids = sweep_grids(name)
    chosen = sorted(set(parts)) if parts else list(range(1, len(grids) + 1))
    if bad := [n for n in chosen if not 1 <= n <= len(grids)]:
        config_exit(f"--part {bad[0]}: study {name!r} has parts 1-{len(grids)}")
    per_part = entry.get("part_settings") or [None] * len(grids)
    jobs = []
    for n in chosen:
        grid, own = grids[n - 1], per_part[n - 1] or {}
        settings = {**entry.get("microscope", {}), **own}
        keys = list(grid)
        for values in itertools.product(*(grid[k] for k in keys)):
            job = dict(zip(keys, values, strict=True))
            overrides = [f"{k}={_value(v)}" for k, v in job.items()]
            rest = sorted(f"{k}={_value(v)}" for k, v in job.items()
                          if k not in ("seed", "method", "experiment"))
            where = root / str(job["experiment"]) / str(job["method"])
            where = (where / ",".join(rest) if rest else where) / f"seed{job['seed']}"
            jobs.append([*overrides, *FIXED, *[f"microscope.{k}={_value(v)}"
                                               for k, v in settings.items()],
                         f"microscope.dir={where}"])
    return jobs


def check_jobs(jobs: list[list[str]]) -> None:
    from src.microscope.study import prepare

    for i, job in enumerate(jobs):
        try:
            prepare(job)
        except ConfigError as e:
            config_exit(f"{e} (job {i + 1} of {len(jobs)}: {' '.join(job)})")


def run_job(job: list[str]) -> int:
    where = Path(job[-1].split("=", 1)[1])
    where.mkdir(parents=True, exist_ok=True)
    with open(where / "log.txt", "a") as log:
        done = subprocess.run([sys.executable, "-m", "src.microscope", *job], cwd=ROOT,
                              stdout=log, stderr=subprocess.STDOUT)
    print(f"[{'done' if done.returncode == 0 else f'exit {done.returncode}'}] {where}", flush=True)
    return done.returncode


def export(root: Path, out: Path) -> None:
    """Each finished study under `root`: its files, and its trunk exported lean."""
    import shutil

    from experiments.export_results import export_run

    for settings in sorted(root.rglob("microscope.yaml")):
        study = settings.parent
        status = study / "trunk" / "status.json"
        if not status.exists() or '"finished"' not in status.read_text():
            print(f"[skip, unfinished] {study}")
            continue
        target = out / study.relative_to(root)
        target.mkdir(parents=True, exist_ok=True)
        for name in STUDY_FILES:
            if (study / name).exists():
                shutil.copy2(study / name, target / name)
        total, kept = export_run(study / "trunk", target / "trunk", TOKEN_FRACTION,
                                 study.relative_to(root).as_posix())
        print(f"[exported] {target} ({kept}/{total} trunk token rows)")


def status(jobs: list[list[str]]) -> list[str]:
    """One line per job: the trunk's status and step, the branched states and horizon rows
    written so far, and the time the branches took."""
    import json

    import pandas as pd

    lines = []
    for job in jobs:
        where = Path(job[-1].split("=", 1)[1])
        trunk = where / "trunk" / "status.json"
        state = json.loads(trunk.read_text())["status"] if trunk.exists() else "not started"
        steps = 0
        if has_metrics(where / "trunk"):
            steps = metrics_bytes(where / "trunk").count(b'"kind": "step"')
        done = {}
        for name in ("branches", "horizons"):
            path = where / f"{name}.parquet"
            done[name] = pd.read_parquet(path) if path.exists() else pd.DataFrame()
        b = done["branches"]
        states = 0 if b.empty else b.groupby(["rollout", "update"]).ngroups
        hours = 0.0 if b.empty else float(b["time_update_s"].sum() + b["time_read_s"].sum()) / 3600
        planned = planned_states(job)
        left = (f"; about {hours / states * (planned - states):.1f} h of branches left at its pace"
                if states and planned and planned > states else "")
        lines.append(f"{where}: trunk {state} at rollout {steps}; {states} of {planned or '?'} states "
                     f"branched ({hours:.2f} h of branch updates and readings{left}); "
                     f"{len(done['horizons'])} horizon rows")
    return lines


def planned_states(job: list[str]) -> int | None:
    """The states a job branches, as src/microscope/branch.py chooses them: every update of
    `microscope.updates` at each rollout from `first` to `last` in steps of `every`. None where
    that depends on the trunk's config (`last` or `updates` left null)."""
    from src.microscope.config import parse_microscope

    settings, _ = parse_microscope(job)
    if settings.last is None or settings.updates is None:
        return None
    return len(range(settings.first, settings.last + 1, settings.every)) * len(settings.updates)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", help="an experiments/sweeps.yaml entry with entry: microscope")
    parser.add_argument("--part", type=int, action="append", metavar="N")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--root", type=Path, help="default runs/microscope/<study>")
    parser.add_argument("--export", type=Path, metavar="OUT",
                        help="export the finished studies under --root to OUT, run nothing")
    parser.add_argument("--status", action="store_true",
                        help="print where each job of the chosen parts stands, run nothing")
    args = parser.parse_args(argv)
    root = args.root or Path("runs/microscope") / args.study
    if args.export:
        export(root, args.export)
        return 0
    if args.workers < 1:
        config_exit(f"--workers must be >= 1, got {args.workers}")
    jobs = study_jobs(args.study, args.part, root)
    if args.status:
        print("\n".join(status(jobs)))
        return 0
    check_jobs(jobs)
    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        codes = list(pool.map(run_job, jobs))
    return max(codes, default=0)


if __name__ == "__main__":
    sys.exit(main())
