"""Time analysis/make_figures.py end to end on a synthetic sweep of ~40 run dirs.

    python benchmarks/bench_analysis.py [--steps 60] [--tokens 3000] [--keep DIR]

The run dirs come from the test suite's writer (tests/analysis/conftest.py), at sweep
size: 4 methods x 4 staleness x 2 seeds, plus the Fig 7 clips and two BAPO ablations at
4x. Only make_figures is timed (a fresh process, imports included), not the synthesis.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _writer():
    # conftest.py is not importable as a module name; load it from its path.
    spec = importlib.util.spec_from_file_location(
        "analysis_synth", ROOT / "tests/analysis/conftest.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod.write_run


def sweep() -> list[tuple[str, int, int]]:
    runs = [
        (m, k, s)
        for m in ("ppo", "clip_higher", "top_entropy", "bapo")
        for k in (1, 2, 4, 8)
        for s in (0, 1)
    ]
    runs += [
        (m, 4, s)
        for m in ("clip_0.8_1.5", "clip_0.5_1.2", "bapo_official", "bapo_value")
        for s in (0, 1)
    ]
    return runs


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--tokens", type=int, default=3000, help="token rows per step")
    p.add_argument("--keep", type=Path, help="write the run dirs here and keep them")
    args = p.parse_args()
    write_run = _writer()
    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep or Path(tmp)
        runs_dir = base / "runs"
        t = time.perf_counter()
        if not runs_dir.exists():
            for m, k, s in sweep():
                write_run(
                    runs_dir,
                    m,
                    k,
                    s,
                    steps=args.steps,
                    tokens_per_step=args.tokens,
                    evals_every=10,
                    keep=False,
                )
        rows = args.steps * args.tokens * len(sweep())
        print(
            f"synthesised {len(sweep())} runs x {args.steps} steps x ~{args.tokens} token rows "
            f"(~{rows / 1e6:.1f}M rows) in {time.perf_counter() - t:.1f}s"
        )
        t = time.perf_counter()
        proc = subprocess.run(
            [
                sys.executable,
                str(ROOT / "analysis/make_figures.py"),
                "--runs",
                str(runs_dir),
                "--out",
                str(base / "figures"),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        elapsed = time.perf_counter() - t
        print(proc.stdout + proc.stderr)
        print(f"make_figures end to end: {elapsed:.1f}s (exit {proc.returncode}; budget 60s)")
        return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
