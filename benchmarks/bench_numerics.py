"""The price of the portable numerics mode: native against portable, side by side.

    python benchmarks/bench_numerics.py [--rounds 2] [--sft-steps 40] [--train-steps 4]

Two measurements, each in fresh processes (the instruction set is fixed when torch loads),
alternating the modes within a round:

- SFT: `--sft-steps` iterations of the default warm start's SFT (the default model and batch,
  after one untimed iteration), seconds per iteration;
- main job: `python -m src.run experiment=staleness_4x method=bapo` for `--train-steps`
  steps without evals, the median `time_step_s` of its step records (the first step is left
  out: it pays for first-call allocations). Portable runs load the shipped warm start; the
  native one is built once into the cache (its key names its mode).

Prints the medians over rounds and native / portable ratios (above 1: portable is faster).
Threads: 2, the CPU default. The load average before each round is printed: on a shared
machine read the ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _setup import REPO

from src.pinning import pin_process
from src.run_files import metrics_records

if __name__ == "__main__":
    pin_process()  # pins (or not, numerics=native) before torch loads; its children too

MODES = ("native", "portable")


def sft_child(steps: int) -> None:
    """Time `steps` SFT iterations in this process's mode; prints one JSON line."""
    from _sft_timing import seconds_per_sft_iteration

    from src._numerics import fingerprint

    print(json.dumps({"s": seconds_per_sft_iteration(steps, threads=2), "isa": fingerprint()["isa"]}))


def time_sft(mode: str, steps: int) -> float:
    out = subprocess.run([sys.executable, __file__, "--sft-child", str(steps), f"numerics={mode}"],
                         cwd=REPO, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"  SFT {mode:<9} {result['s']:.3f} s/it ({result['isa']} kernels)", flush=True)
    return result["s"]


def time_main_job(mode: str, steps: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "src.run", "experiment=staleness_4x", "method=bapo",
               f"numerics={mode}", f"train.steps={steps}", "eval.greedy=false",
               "eval.sampled=false", "logger.progress=False", f"hydra.run.dir={run}"]
        # a timing run without evals (src/preflight.py ENV_NO_EVAL)
        subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=True,
                       env={**os.environ, "REPRO_NO_EVAL": "1"})
        steps_s = [r["time_step_s"] for r in metrics_records(run) if r["kind"] == "step"][1:]
        isa = json.loads((run / "meta.json").read_text())["numerics"]["isa"]
    med = statistics.median(steps_s)
    print(f"  main job {mode:<9} {med:.3f} s/step ({isa} kernels)", flush=True)
    return med


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--sft-steps", type=int, default=40)
    p.add_argument("--train-steps", type=int, default=4)
    p.add_argument("--sft-child", type=int, help=argparse.SUPPRESS)
    a, _ = p.parse_known_args()  # numerics=... is read by src when torch loads
    if a.sft_child:
        sft_child(a.sft_child)
        return
    times: dict[tuple[str, str], list[float]] = {}
    for r in range(a.rounds):
        print(f"round {r + 1} (load average {os.getloadavg()[0]:.2f})", flush=True)
        order = MODES if r % 2 == 0 else MODES[::-1]  # alternate who goes first
        for mode in order:
            times.setdefault(("SFT s/it", mode), []).append(time_sft(mode, a.sft_steps))
        for mode in order:
            times.setdefault(("main job s/step", mode), []).append(time_main_job(mode, a.train_steps))
    print(f"\nmedians over {a.rounds} rounds; ratio = native / portable (above 1: portable faster)")
    print("| measure | native | portable | ratio |\n|---|---|---|---|")
    for what in ("SFT s/it", "main job s/step"):
        n, q = (statistics.median(times[(what, m)]) for m in MODES)
        print(f"| {what} | {n:.3f} | {q:.3f} | {n / q:.2f} |")


if __name__ == "__main__":
    main()
