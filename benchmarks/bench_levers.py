"""Speed levers side by side: whole `python -m src.run` runs of one experiment, one per lever,
in alternating rounds, timed on each run's own step clock, with what each does to the regime.

    python benchmarks/bench_levers.py --experiment smol_4x --steps 3 --warmup 1 --rounds 2 \\
        --lever "sampler:rollout.behaviour=sampler" --lever "fused:train.fused_optimizer=true"

Every run is the experiment with `method=ppo`, `--threads` threads, `--steps` rollouts, no
evals and no checkpoints; a lever is `NAME:OVERRIDE[ OVERRIDE...]`, and `base`
(no override) always runs first in each round. Rounds alternate the levers, so a change in
the machine's load hits all of them alike. Per lever: the median over rounds of the mean
step after the first `--warmup` steps, and of its phases (rollout, behaviour pass, updates),
the ratio of base's step time to the lever's, and the regime over the timed steps (loss
tokens clipped, mean |log r| of the stale updates, update 0's mean ratio). One CSV row per
run goes to `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]


def parse_lever(text: str) -> tuple[str, list[str]]:
    name, sep, overrides = text.partition(":")
    if not sep or not name or not overrides.strip() or name == "base":
        raise SystemExit(f"--lever {text!r}: write NAME:KEY=VALUE[ KEY=VALUE...] (NAME not 'base')")
    return name, overrides.split()


def run_once(a, overrides: list[str]) -> dict:
    run_dir = Path(tempfile.mkdtemp(prefix="bench-levers-")) / "run"
    cmd = [sys.executable, "-m", "src.run", f"experiment={a.experiment}", "method=ppo",
           f"train.steps={a.warmup + a.steps}", f"train.threads={a.threads}", f"seed={a.seed}",
           "logger.progress=false", "eval.greedy=false", "eval.sampled=false",
           "eval.every=100000", "checkpoint.every=100000",
           "checkpoint.keep_final=false", *overrides, f"hydra.run.dir={run_dir}"]
    t0 = time.perf_counter()
    # a timing run without evals (src/preflight.py ENV_NO_EVAL)
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "REPRO_NO_EVAL": "1"})
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}\nfailed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    from src.run_files import metrics_records  # the repo root is on sys.path (_setup, below)

    records = metrics_records(run_dir)
    steps = [r for r in records if r["kind"] == "step"][a.warmup:]
    timed = {r["step"] for r in steps}
    updates = [r for r in records if r["kind"] == "update" and r["step"] in timed]
    stale = [u for u in updates if u["update"] > 0]
    loss_tokens = sum(u["tokens_in_loss"] for u in updates)
    return {
        "step_s": statistics.fmean(r["time_step_s"] for r in steps),
        "rollout_s": statistics.fmean(r["time_rollout_s"] for r in steps),
        "behaviour_s": statistics.fmean(r["time_behavior_s"] for r in steps),
        "updates_s": statistics.fmean(r["time_step_s"] - r["time_rollout_s"] - r["time_behavior_s"]
                                      for r in steps),
        "process_s": wall,
        "clip_frac": sum(u["clip_frac"] * u["tokens_in_loss"] for u in updates) / loss_tokens,
        "abs_log_ratio_stale": statistics.fmean(u["abs_log_ratio_mean"] for u in stale),
        "update0_ratio_mean": statistics.fmean(u["ratio_mean"] for u in updates if u["update"] == 0),
        "response_length": statistics.fmean(r["response_length_mean"] for r in steps),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", default="smol_4x")
    p.add_argument("--lever", action="append", default=[], help="NAME:KEY=VALUE[ KEY=VALUE...]")
    p.add_argument("--steps", type=int, default=3, help="timed rollouts per run")
    p.add_argument("--warmup", type=int, default=1, help="rollouts dropped first")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="CSV of every run (default: none)")
    a = p.parse_args(argv)
    levers = [("base", [])] + [parse_lever(x) for x in a.lever]
    if not a.lever or a.steps < 1 or a.warmup < 0 or a.rounds < 1:
        raise SystemExit("give at least one --lever, --steps >= 1, --warmup >= 0, --rounds >= 1")
    rows = []
    for rnd in range(a.rounds):
        for name, overrides in levers:
            row = {"round": rnd, "lever": name, "overrides": " ".join(overrides), **run_once(a, overrides)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    table = pd.DataFrame(rows)
    medians = table.groupby("lever", sort=False).median(numeric_only=True).drop(columns="round")
    medians["base_over_lever"] = medians.loc["base", "step_s"] / medians["step_s"]
    print(f"\n{a.experiment}, {a.threads} thread(s), {a.steps} timed rollouts after {a.warmup}, "
          f"medians over {a.rounds} rounds:")
    print(medians.round(4).to_string())
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(a.out, index=False)


if __name__ == "__main__":
    import _setup  # noqa: F401 - this checkout's src first on sys.path

    main()
