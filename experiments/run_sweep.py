"""Run one of the sweeps in experiments/sweeps.yaml as a Hydra multirun.

    python experiments/run_sweep.py main [--dry-run] [-- extra overrides]

Runs go to runs/<experiment>/<method>/seed<N>/ (extra overrides that change the numbers
add a dir level naming them); finished ones are skipped, unfinished ones resume, in both
cases only if made with the same config. Every job is checked before the first starts.
Runs execute one after another in one process: on 2 cores one process with 2 threads
beats two with 1, and the imports are paid once.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def sweep_command(name: str, extra: list[str]) -> list[str]:
    sweeps = yaml.safe_load((HERE / "sweeps.yaml").read_text())
    if name not in sweeps:
        raise SystemExit(f"unknown sweep {name!r}; choose one of {sorted(sweeps)} or all")
    grid = sweeps[name]["grid"]
    overrides = [f"{key}={','.join(map(str, values))}" for key, values in grid.items()]
    return [sys.executable, "-m", "src.run", "-m", *overrides, *extra]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("sweep", help="a name in sweeps.yaml, or 'all'")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    parser.add_argument("extra", nargs="*", help="overrides added to every run")
    args = parser.parse_args()
    names = (
        list(yaml.safe_load((HERE / "sweeps.yaml").read_text()))
        if args.sweep == "all"
        else [args.sweep]
    )
    for name in names:
        cmd = sweep_command(name, args.extra)
        print("$", " ".join(cmd), flush=True)
        if not args.dry_run:
            subprocess.run(cmd, cwd=REPO, check=True)


if __name__ == "__main__":
    main()
