"""Speed of the objectives library on realistic token batches (CPU, 2 threads).

    python benchmarks/bench_objectives.py [--sizes 1e4 1e5 1e6] [--repeats 5]

Data: GRPO-style mini-batches. Responses of 50-500 tokens in groups of 8, binary rewards
(per-prompt solve rate drawn uniformly), group-normalised advantages; behaviour log-probs
-|N(0, 1.5)|; log-ratios N(0, sigma) with sigma drawn in [0.1, 0.3] per response, so ratios
are log-normal around 1. Tensors are [B, T] float32 with a padding mask.

Compared, side by side in one process: median wall time of --repeats runs after a warm-up,
the contenders of one row timed in turn (A, B, A, B, ...) so that load from other processes
hits them alike. The loss table adds the ratio of median CPU (process) time, which is less
sensitive to a busy machine.
1. BAPO bound search: `adaptive_bounds` (fast) vs `adaptive_bounds_reference` (literal
   loop), when rho0 is met early (defaults, rho0 = 0.4) and when the search walks the whole
   grid (rho0 = 0.99: 36 c_high steps then 15 c_low steps). Goal: >= 10x on the whole grid
   at N = 1e6.
2. The whole loss, forward and backward to the log-probs: policy_loss('bapo') vs
   policy_loss('ppo') on the same tensors. Goal: bapo <= 1.5x ppo at N = 1e6.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

# On a shared machine, OpenMP's default busy-wait makes a 2-thread torch op up to ~50x slower
# whenever another process holds a core; passive waiting keeps the numbers about the code.
# Set OMP_WAIT_POLICY yourself to override (it must be set before torch is imported).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import _setup  # noqa: E402, F401 - this checkout first on sys.path

from src.pinning import pin_process  # noqa: E402

if __name__ == "__main__":
    pin_process()  # the numerics, before torch loads

import torch  # noqa: E402

from src.algorithms import (  # noqa: E402
    adaptive_bounds,
    adaptive_bounds_reference,
    group_advantages,
    policy_loss,
)

GROUP = 8
MIN_LEN, MAX_LEN = 50, 500


def make_batch(n_tokens: int, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    groups = max(1, math.ceil(n_tokens / (GROUP * (MIN_LEN + MAX_LEN) / 2)))
    lengths = torch.randint(MIN_LEN, MAX_LEN + 1, (groups * GROUP,), generator=gen)
    # rescale the lengths so the batch holds exactly n_tokens response tokens
    lengths = (lengths.double() * n_tokens / lengths.sum()).floor().long().clamp(min=1)
    lengths[: n_tokens - int(lengths.sum())] += 1
    b = lengths.numel()
    solve_rate = torch.rand(b // GROUP, 1, generator=gen).expand(-1, GROUP).reshape(-1)
    rewards = (torch.rand(b, generator=gen) < solve_rate).float()
    adv = group_advantages(rewards, GROUP).advantages
    t = int(lengths.max())
    mask = torch.arange(t)[None, :] < lengths[:, None]
    logp_b = -torch.randn(b, t, generator=gen).abs() * 1.5
    sigma = 0.1 + 0.2 * torch.rand(b, 1, generator=gen)
    log_ratio = torch.randn(b, t, generator=gen) * sigma
    return {"logp": logp_b + log_ratio, "logp_b": logp_b, "adv": adv, "mask": mask}


def interleaved(fns: dict, repeats: int) -> tuple[dict, dict, dict]:
    """Median wall and CPU milliseconds of each fn, timed in turn (A, B, C, A, B, C, ...)
    so that load from other processes hits every contender alike; plus each fn's result."""
    results = {name: fn() for name, fn in fns.items()}  # warm-up
    wall = {name: [] for name in fns}
    cpu = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall[name].append(time.perf_counter() - w0)
            cpu[name].append(time.process_time() - c0)
    med = {name: 1e3 * statistics.median(v) for name, v in wall.items()}
    med_cpu = {name: 1e3 * statistics.median(v) for name, v in cpu.items()}
    return med, med_cpu, results


def search_fns(batch, **params):
    ratio = (batch["logp"] - batch["logp_b"]).exp()
    args = (ratio, batch["adv"], batch["mask"])
    return {"fast": lambda: adaptive_bounds(*args, **params),
            "reference": lambda: adaptive_bounds_reference(*args, **params)}


def loss_fn(batch, method: str, **params):
    def step():
        logp = batch["logp"].clone().requires_grad_()
        out = policy_loss(method, logp, batch["logp_b"], batch["adv"], batch["mask"], **params)
        out.loss.backward()
        return out

    return step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", type=float, default=[1e4, 1e5, 1e6],
                        help="response-token counts N per mini-batch")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per cell (median)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, median of {args.repeats} runs, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n")
    search_rows, loss_rows, goals = [], [], {}
    for size in args.sizes:
        n = int(size)
        batch = make_batch(n, args.seed)
        n_tok = int(batch["mask"].sum())
        shape = "x".join(map(str, batch["mask"].shape))
        for case, params in (("target met early (rho0 0.4)", {}),
                             ("whole grid (rho0 0.99)", {"rho0": 0.99})):
            ms, _, res = interleaved(search_fns(batch, **params), args.repeats)
            fast, ref = res["fast"], res["reference"]
            same = (fast.c_low, fast.c_high, fast.steps, fast.reached) == \
                (ref.c_low, ref.c_high, ref.steps, ref.reached)
            speedup = ms["reference"] / ms["fast"]
            search_rows.append(
                f"| {n_tok:,} | {shape} | {case} | {fast.steps} | {ms['fast']:.2f} "
                f"| {ms['reference']:.2f} | {speedup:.1f}x | {'yes' if same else 'NO'} |")
            if "whole" in case:
                goals["search"] = (n_tok, speedup)
        ms, cpu, res = interleaved({"ppo": loss_fn(batch, "ppo"),
                                    "bapo": loss_fn(batch, "bapo"),
                                    "bapo99": loss_fn(batch, "bapo", rho0=0.99)}, args.repeats)
        ratio, ratio99 = ms["bapo"] / ms["ppo"], ms["bapo99"] / ms["ppo"]
        loss_rows.append(
            f"| {n_tok:,} | {shape} | {ms['ppo']:.1f} | {ms['bapo']:.1f} "
            f"({res['bapo'].metrics['bapo_steps']} steps) | {ratio:.2f}x "
            f"| {ms['bapo99']:.1f} ({res['bapo99'].metrics['bapo_steps']} steps) "
            f"| {ratio99:.2f}x | {cpu['bapo'] / cpu['ppo']:.2f}x / {cpu['bapo99'] / cpu['ppo']:.2f}x |")
        goals["loss"] = (n_tok, ratio, ratio99)

    print("BAPO bound search: fast `adaptive_bounds` vs literal `adaptive_bounds_reference`\n")
    print("| N tokens | [B, T] | case | steps | fast (ms) | reference (ms) | speedup | same result |")
    print("|---:|---|---|---:|---:|---:|---:|---|")
    print("\n".join(search_rows))
    print("\nWhole loss, forward + backward to logp (policy_loss incl. per-token metrics)\n")
    print("| N tokens | [B, T] | ppo (ms) | bapo rho0 0.4 (ms) | bapo/ppo | bapo rho0 0.99 (ms) "
          "| bapo/ppo | CPU-time bapo/ppo (0.4 / 0.99) |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    print("\n".join(loss_rows))
    n_tok, speedup = goals["search"]
    _, ratio, ratio99 = goals["loss"]
    print(f"\nGoals at N = {n_tok:,}: whole-grid search speedup {speedup:.1f}x (goal >= 10x: "
          f"{'met' if speedup >= 10 else 'MISSED'}); bapo/ppo {ratio:.2f}x, whole grid "
          f"{ratio99:.2f}x (goal <= 1.5x: {'met' if max(ratio, ratio99) <= 1.5 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
