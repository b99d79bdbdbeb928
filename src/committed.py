"""The committed results: where they live, and the committed cell a run belongs to.

Committed runs are read-only to the runner: every committed number must keep rerunning bit
for bit, so a run may not write (not even its lock file) into them. A dir is committed when
it lies in the repo's `experiments/` (which holds committed results and the scripts that
make them; runs go to `runs/` and are copied in by experiments/export_results.py), a rule
that needs no git; where git is at hand, a dir elsewhere in the repo that holds tracked
files (a test's reference run) is committed too.

A finished run is placed against the committed seeds of its cell: the committed runs made
with its config but for the seed (and `train.threads`, which reaches only the sampler's own
log-probs, docs/numerics.md), found by their config.yaml under experiments/<root>/
<experiment>/<method>/. Only those runs' metrics (metrics.jsonl, metrics.jsonl.gz in an
export; src/run_files.py) are read.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from src.eval_schedule import FINAL_WINDOW
from src.run_dir import config_differences, stored_config
from src.run_files import has_metrics, metrics_lines

REPO = Path(__file__).resolve().parent.parent
EXPERIMENTS = REPO / "experiments"
# the reports' final accuracy: the mean of the last 3 evals after step 0 (one constant)
FINAL_EVALS = FINAL_WINDOW
# Keys that do not make another cell: the seed is what varies within one, and the thread
# count changes only the sampler's own log-probs, a diagnostic (docs/numerics.md).
SAME_CELL_IGNORES = ("seed", "train.threads")


def committed_root(path: Path, repo: Path = REPO) -> Path | None:
    """The committed dir `path` lies in (experiments/<root>, or a git-tracked dir of the
    repo), or None when a run may write there."""
    path = Path(path).expanduser().resolve()
    experiments = repo / "experiments"
    if path.is_relative_to(experiments) and path != experiments:
        return experiments / path.relative_to(experiments).parts[0]
    if not path.is_relative_to(repo) or not path.exists() or shutil.which("git") is None:
        return None
    try:
        tracked = subprocess.run(["git", "-C", str(repo), "ls-files", "--", str(path)],
                                 capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return path if tracked.returncode == 0 and tracked.stdout.strip() else None


def runs_path_for(path: Path, repo: Path = REPO) -> Path:
    """Where under runs/ a run aimed at a committed dir belongs: the same path below runs/."""
    path = Path(path).expanduser().resolve()
    for base in (repo / "experiments", repo):
        if path.is_relative_to(base):
            return Path("runs") / path.relative_to(base)
    return Path("runs") / path.name


def committed_dir_message(path: Path, key: str, default: Path | None = None) -> str | None:
    """The one-line refusal of a run dir (or sweep dir) in committed results, naming the
    runs/ path to write to instead (`default`: where the run goes without `key`); None when
    the runner may write there."""
    root = committed_root(path)
    if root is None:
        return None
    shown = root.relative_to(REPO) if root.is_relative_to(REPO) else root
    instead = (f"leave {key} out (the run then goes to {default})" if default is not None
               else f"point {key} under runs/, e.g. {runs_path_for(path)}")
    return (f"{key}={path} lies in committed results ({shown}), which the runner never writes "
            "(their numbers must keep rerunning bit for bit; overwrite=true would move them "
            f"aside); {instead}, and compare it with its cell by python "
            "experiments/verify_cell.py CELL --compare-dir RUN_DIR")


def _evals(run_dir: Path) -> list[dict]:
    records = []
    for line in metrics_lines(run_dir):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("kind") == "eval":
            records.append(record)
    return records


def final_accuracy(run_dir: Path, key: str = "greedy_accuracy") -> float | None:
    """The mean of `key` over the run's last FINAL_EVALS evals after step 0 (the warm start's
    eval, before any update); None when it has none."""
    values = [r[key] for r in _evals(run_dir) if r.get("step") and r.get(key) is not None]
    tail = values[-FINAL_EVALS:]
    return sum(tail) / len(tail) if tail else None


def start_accuracy(run_dir: Path, key: str = "greedy_accuracy") -> float | None:
    """`key` at the step-0 eval (the warm start); None when there is none."""
    return next((r.get(key) for r in _evals(run_dir) if r.get("step") == 0), None)


def committed_cells(config: dict, experiments: Path = EXPERIMENTS) -> dict[Path, list[Path]]:
    """{cell dir: its committed seed dirs} for the cells made with `config` but for
    SAME_CELL_IGNORES. Only dirs named by the config's experiment and method are read."""
    name = (config.get("experiment") or {}).get("name")
    method = (config.get("method") or {}).get("name")
    if not name or not method or not experiments.is_dir():
        return {}
    candidates = [p.parent for pattern in (f"*/{name}/{method}/seed*/config.yaml",
                                           f"*/{name}/{method}/*/seed*/config.yaml")
                  for p in experiments.glob(pattern) if has_metrics(p.parent)]
    cells: dict[Path, list[Path]] = {}
    for seed_dir in sorted(set(candidates)):
        stored = stored_config(seed_dir)
        if stored is not None and not [k for k, _, _ in config_differences(stored, config)
                                       if k not in SAME_CELL_IGNORES]:
            cells.setdefault(seed_dir.parent, []).append(seed_dir)
    return cells


def placement_lines(run_dir: Path, experiments: Path = EXPERIMENTS, shown: int = 3) -> list[str]:
    """The summary's lines that place a finished run's final greedy accuracy against the
    committed seeds of its cell: their range, and whether the run is inside it."""
    run_dir = Path(run_dir)
    config = stored_config(run_dir)
    value = final_accuracy(run_dir) if has_metrics(run_dir) else None
    if config is None or value is None or committed_root(run_dir) is not None:
        return []
    lines = []
    for cell, seeds in list(committed_cells(config, experiments).items())[:shown]:
        finals = [f for f in map(final_accuracy, seeds) if f is not None]
        if not finals:
            continue
        low, high = min(finals), max(finals)
        starts = sorted({s for s in map(start_accuracy, seeds) if s is not None})
        start = ""
        if len(starts) == 1:  # one warm start: say whether the cell ends below or above it
            side = ("all below" if high < starts[0] else "all above" if low > starts[0]
                    else "around")
            start = f", {side} their start of {starts[0]:.3f}"
        where = "inside" if low <= value <= high else "outside"
        shown_cell = cell.relative_to(REPO) if cell.is_relative_to(REPO) else cell
        lines.append(f"  committed seeds of this cell ({shown_cell}, {len(finals)} seeds) end at "
                     f"greedy {low:.3f}..{high:.3f}{start} (mean of the last {FINAL_EVALS} evals); "
                     f"this run's {value:.3f} is {where} their range")
    return lines
