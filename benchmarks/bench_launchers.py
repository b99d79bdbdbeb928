"""Sweep throughput through Hydra's launchers: the same N-run sweep three ways.

    python benchmarks/bench_launchers.py                     # 4 runs, size `small`, 1 round
    python benchmarks/bench_launchers.py --size full --rounds 2 --out bench_launchers.json

Modes (experiments/run_sweep.py, as a user runs it):
- `sequential`: the basic launcher, one run after another in one process, `train.threads=2`;
- `joblib`: 2 loky workers x 1 thread (`--launcher joblib --workers 2 --threads 1`);
- `submitit_local`: 2 at a time x 1 thread (`--launcher submitit_local --workers 2 --threads 1`).

The sweep is seeds 0..N-1 of one cell (ppo at staleness 4x). Sizes: `smoke` (the smoke
experiment on the tests' tiny model, seconds a run: mostly process start-up), `small`
(staleness_4x on the tiny model, 10 steps, eval on 32 problems: tens of seconds a run) and
`full` (the default config: staleness_4x, 30 steps, the default warm start, minutes a run).
The warm start is built once before timing, into a scratch cache shared by every mode. Each
mode and round gets a fresh sweep dir; rounds alternate the order of the modes, so a change
of the machine's load hits every mode alike. The wall time covers the whole command (the
checks, process start-up, the runs). Printed: wall time, runs per hour and its ratio to
sequential (median over rounds), and the load average before and after, since a machine
shared with other work makes every number noisy. Not part of the tests' pass/fail.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _setup import REPO  # this checkout first on sys.path

TINY = ["model.architecture.hidden_size=64", "model.architecture.num_layers=2",
        "model.architecture.num_heads=2", "model.sft.steps=150", "model.sft.batch_size=32",
        "model.sft.eval_problems=16", "model.sft.eval_samples=1", "model.sft.lr=5e-3",
        "model.architecture.tokenizer_corpus=2000", "model.sft.pack_len=0",
        "task.params.max_terms=2", "task.params.max_digits=1"]  # tests/conftest.py TINY_MODEL
SIZES = {
    "smoke": ["experiment=smoke", *TINY],
    "small": ["experiment=staleness_4x", *TINY, "train.steps=10", "task.eval_problems=32",
              "eval.every=10", "checkpoint.every=10"],
    "full": ["experiment=staleness_4x"],
}
MODES = {
    "sequential": (None, None, 2),
    "joblib": ("joblib", 2, 1),
    "submitit_local": ("submitit_local", 2, 1),
}


def sweep(mode: str, runs: int, base: list[str], sweep_dir: Path) -> float:
    """Wall seconds of the whole sweep through experiments/run_sweep.py's own code path."""
    from experiments import run_sweep

    launcher, workers, threads = MODES[mode]
    extra = [*base, "method=ppo", "logger.progress=false", f"hydra.sweep.dir={sweep_dir}"]
    launch = run_sweep.choose_launcher(launcher, workers, threads, extra)
    cmd = [sys.executable, "-m", "src.run", "-m", f"seed={','.join(map(str, range(runs)))}",
           *extra, *launch.overrides]
    t0 = time.perf_counter()
    run_sweep.check_all([cmd])
    out = io.StringIO()
    code = run_sweep.run_sweep(f"bench_{mode}", [cmd], launch, out=out)
    wall = time.perf_counter() - t0
    if code != 0:
        raise SystemExit(f"{mode}: the sweep failed:\n{out.getvalue()}")
    return wall


def warm(base: list[str], scratch: Path) -> None:
    """Build the warm start once (not timed): a one-step run in a scratch dir."""
    cmd = [sys.executable, "-m", "src.run", *base, "method=ppo", "train.steps=1",
           "logger.progress=false", "eval.every=100", f"hydra.run.dir={scratch / 'warm'}"]
    subprocess.run(cmd, cwd=REPO, check=True, capture_output=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--out", type=Path, help="write the numbers as JSON here")
    p.add_argument("extra", nargs="*", help="overrides added to every run")
    args = p.parse_args()
    modes = args.modes.split(",")
    with tempfile.TemporaryDirectory(prefix="bench_launchers_") as tmp:
        scratch = Path(tmp)
        base = [*SIZES[args.size], f"cache_dir={scratch / 'cache'}", *args.extra]
        warm(base, scratch)
        load_before = os.getloadavg()
        walls: dict[str, list[float]] = {m: [] for m in modes}
        for r in range(args.rounds):
            order = modes if r % 2 == 0 else modes[::-1]
            for mode in order:
                wall = sweep(mode, args.runs, base, scratch / f"r{r}_{mode}")
                walls[mode].append(wall)
                print(f"round {r + 1} {mode:15s} {wall:7.1f} s  ({args.runs * 3600 / wall:.1f} runs/h)",
                      flush=True)
        load_after = os.getloadavg()
    rate = {m: args.runs * 3600 / statistics.median(w) for m, w in walls.items()}
    ref = rate.get("sequential")
    print(f"\n{args.runs} runs, size {args.size}, {args.rounds} round(s), {os.cpu_count()} cores, "
          f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    print(f"{'mode':15s} {'wall s (median)':>16s} {'runs/h':>8s} {'vs sequential':>14s}")
    for m in modes:
        ratio = f"{rate[m] / ref:.2f}x" if ref else "-"
        print(f"{m:15s} {statistics.median(walls[m]):16.1f} {rate[m]:8.1f} {ratio:>14s}")
    if args.out:
        args.out.write_text(json.dumps({"runs": args.runs, "size": args.size, "rounds": args.rounds,
                                        "walls_s": walls, "runs_per_hour": rate,
                                        "load_before": load_before, "load_after": load_after},
                                       indent=2))


if __name__ == "__main__":
    from src.pinning import pin_process

    pin_process()  # before torch loads, as `python -m src.run` does
    main()
