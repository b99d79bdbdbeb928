"""Run one of the sweeps in experiments/sweeps.yaml as Hydra multiruns.

    python experiments/run_sweep.py main [--dry-run] [-- extra overrides]

A sweep is a `grid` (one multirun over its product) or `parts`, a list of grids run in
order, one multirun each, for a sweep that is no single product (a 1x control beside a
4x grid). Runs go to runs/<experiment>/<method>/seed<N>/ (extra overrides that change the
numbers add a dir level naming them); finished ones are skipped, unfinished ones resume, in
both cases only if made with the same config. Every job of every part is checked before the
first starts. Runs execute one after another in one process per part: the imports are paid
once, and on 2 cores two 1-thread processes side by side gave only about 1.2x the throughput
of one 2-thread process (README, Benchmarks), with different (1-thread) numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
EXIT_CONFIG = 2  # as src/run.py: a config error, found before any run starts


def load_sweeps() -> dict[str, Any]:
    return yaml.safe_load((HERE / "sweeps.yaml").read_text())


def sweep_grids(name: str, sweeps: dict[str, Any] | None = None) -> list[dict[str, list]]:
    """The grids of sweep `name`, in the order they run: its `grid`, or each of its `parts`."""
    sweeps = load_sweeps() if sweeps is None else sweeps
    if name not in sweeps:
        raise SystemExit(f"unknown sweep {name!r}; choose one of {sorted(sweeps)} or all")
    entry = sweeps[name]
    if ("grid" in entry) == ("parts" in entry):
        raise SystemExit(f"sweeps.yaml: sweep {name!r} needs exactly one of `grid` (one "
                         "multirun) or `parts` (a list of grids, run in order)")
    grids = [entry["grid"]] if "grid" in entry else entry["parts"]
    if not isinstance(grids, list) or not grids or not all(isinstance(g, dict) and g for g in grids):
        raise SystemExit(f"sweeps.yaml: sweep {name!r}: `parts` must be a non-empty list of "
                         "grids, each a mapping of override key -> list of values")
    return grids


def grid_overrides(grid: dict[str, list]) -> list[str]:
    """`key=v1,v2` per key, in the grid's order (Hydra runs the first key outermost)."""
    return [f"{key}={','.join(map(_value, values))}" for key, values in grid.items()]


def _value(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)  # YAML true -> Hydra's true


def sweep_commands(name: str, extra: list[str]) -> list[list[str]]:
    """One `python -m src.run -m ...` command per grid of the sweep."""
    return [[sys.executable, "-m", "src.run", "-m", *grid_overrides(g), *extra]
            for g in sweep_grids(name)]


def check_all(commands: list[list[str]]) -> None:
    """Every job of every command composed and checked (src/preflight.py) before any runs:
    a bad part 2 must not surface hours after part 1 started."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from src.config import ConfigError
    from src.preflight import check_run

    with contextlib.chdir(REPO):  # run dirs are relative to where the runs start
        try:
            for cmd in commands:
                check_run(cmd[4:], multirun=True)
        except ConfigError as e:
            print(f"config error: {e}", file=sys.stderr)
            raise SystemExit(EXIT_CONFIG) from None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("sweep", help="a name in sweeps.yaml, or 'all'")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    parser.add_argument("extra", nargs="*", help="overrides added to every run")
    args = parser.parse_args()
    names = list(load_sweeps()) if args.sweep == "all" else [args.sweep]
    commands = [cmd for name in names for cmd in sweep_commands(name, args.extra)]
    if not args.dry_run and len(commands) > 1:
        check_all(commands)  # a single multirun checks its own jobs first (src/run.py)
    for cmd in commands:
        print("$", " ".join(cmd), flush=True)
        if not args.dry_run:
            subprocess.run(cmd, cwd=REPO, check=True)


if __name__ == "__main__":
    main()
