"""libgomp's wait policy and thread count on an idle and on a busy machine, side by side.

    python benchmarks/bench_wait_policy.py [--rounds 2] [--steps 10] [--settings ...]

Each setting times `--steps` warm-start SFT iterations of the default model (after one
untimed step) in a fresh process, because libgomp reads its environment once, when it is
loaded. In each round every setting runs once, in turn, first with nothing else running
("idle": whatever else the machine runs, the load average is printed) and then beside a
background job of this script's own (two threads of 512x512 matmuls, libgomp's default
spin), the "one other 2-thread job" of a shared machine. Prints the median seconds per
iteration and its ratio to libgomp's default spin in the same condition.

Settings: `default` (GOMP_SPINCOUNT=300000, libgomp's own default), `spin<N>`
(GOMP_SPINCOUNT=N), `threads1` (default spin, one thread), `passive`
(OMP_WAIT_POLICY=PASSIVE) and `auto` (nothing set: the project's choice from the load
average, src/_wait_policy.py).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys

from _setup import REPO

from src.pinning import pin_process

if __name__ == "__main__":
    pin_process()  # before torch: it picks the wait policy libgomp will read

DEFAULT_SETTINGS = ["default", "spin10000", "spin100000", "threads1", "auto"]
LOAD_JOB = ("import torch\ntorch.set_num_threads(2)\na = torch.randn(512, 512)\n"
            "while True:\n    a = torch.tanh(a @ a)\n")


def setting_env(name: str) -> tuple[dict[str, str], int]:
    """(environment, threads) of a setting; the user's own wait settings are removed."""
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    env["PYTHONPATH"] = str(REPO)
    if name == "default" or name == "threads1":
        env["GOMP_SPINCOUNT"] = "300000"
    elif name.startswith("spin"):
        env["GOMP_SPINCOUNT"] = str(int(name[4:]))
    elif name == "passive":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    elif name != "auto":
        raise SystemExit(f"unknown setting {name!r}; see --help")
    return env, 1 if name == "threads1" else 2


def child(steps: int, threads: int) -> None:
    """Time `steps` SFT iterations; prints one JSON line."""
    from _sft_timing import seconds_per_sft_iteration

    from src._wait_policy import CHOICE

    print(json.dumps({"s_per_it": seconds_per_sft_iteration(steps, threads), "choice": CHOICE}))


def run_setting(name: str, steps: int) -> float:
    env, threads = setting_env(name)
    out = subprocess.run([sys.executable, __file__, "--child", "--steps", str(steps),
                          "--threads", str(threads)], env=env, cwd=REPO, capture_output=True,
                         text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"  {name:<12} {result['s_per_it']:.3f} s/it  ({result['choice']['reason']})", flush=True)
    return result["s_per_it"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--settings", nargs="+", default=DEFAULT_SETTINGS)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=2, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a.steps, a.threads)
        return
    times: dict[tuple[str, str], list[float]] = {}
    for r in range(a.rounds):
        for condition in ("idle", "busy"):
            load = None
            if condition == "busy":
                load = subprocess.Popen([sys.executable, "-c", LOAD_JOB], start_new_session=True,
                                        env={**os.environ, "GOMP_SPINCOUNT": "300000"})
            try:
                print(f"round {r + 1}, {condition} (load average {os.getloadavg()[0]:.2f})",
                      flush=True)
                order = a.settings if r % 2 == 0 else a.settings[::-1]  # alternate who goes first
                for name in order:
                    times.setdefault((condition, name), []).append(run_setting(name, a.steps))
            finally:
                if load is not None:
                    os.killpg(load.pid, signal.SIGKILL)
                    load.wait()
    print(f"\nmedian s/it over {a.rounds} rounds of {a.steps} SFT iterations; "
          "ratio = time / default spin's time in the same condition")
    print("| setting | idle s/it | idle ratio | busy s/it | busy ratio |\n|---|---|---|---|---|")
    for name in a.settings:
        row = []
        for condition in ("idle", "busy"):
            med = statistics.median(times[(condition, name)])
            base = statistics.median(times[(condition, "default")]) if (condition, "default") in times else None
            row += [f"{med:.3f}", f"{med / base:.2f}" if base else "-"]
        print(f"| {name} | {' | '.join(row)} |")


if __name__ == "__main__":
    main()
