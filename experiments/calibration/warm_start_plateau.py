"""Pilots for the GPU-size warm start's plateau (issue: the GPU path learns).

One pilot = one warm-start SFT of the tiny family at a given shape and recipe on the GPU
check's harder chain-sum mix (2-8 terms of up to two digits), run on CPU with the project's
own SFT step (`src.warm_start.sft`), then a greedy eval on held-out problems. Each pilot
appends one row to `warm_start_plateau.csv` (and its loss curve to
`warm_start_plateau_curves.jsonl`), so the table grows as pilots finish:

    python experiments/calibration/warm_start_plateau.py NAME [NAME ...] [--threads 1]
    python experiments/calibration/warm_start_plateau.py --plot   # -> warm_start_plateau.png

The pilots are named in PILOTS below with the expectation written before each ran; the
findings are in `warm_start_plateau.md`.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

import torch  # noqa: E402

from src.models.precision import autocast as autocast_context  # noqa: E402
from src.models.tiny import build_tiny_model, num_parameters  # noqa: E402
from src.models.tokenizer import train_tokenizer  # noqa: E402
from src.tasks import get_task  # noqa: E402
from src.warm_start.evaluate import evaluate  # noqa: E402
from src.warm_start.settings import resolve_configs  # noqa: E402
from src.warm_start.sft import _optimizer, _sft_loss, sft_batch  # noqa: E402

HARD_TASK = {"min_terms": 2, "max_terms": 8, "max_digits": 2}  # the GPU check's mix
GPU_SHAPE = {"hidden_size": 896, "num_layers": 8, "num_heads": 14,
             "max_position_embeddings": 256}
GPU_SFT = {"batch_size": 64, "lr": 5e-4, "warmup_steps": 100, "pack_len": 256,
           "max_new_tokens": 128}
CPU_SHAPE = {"hidden_size": 256, "num_layers": 4, "num_heads": 4,
             "max_position_embeddings": 256}

# name: task params, architecture, SFT overrides, autocast, and the autocast scope: "outer"
# is the warm start before the fix (one context around the whole SFT loop), "forward" the
# fix (each step's forward and loss in its own context, src/warm_start/sft.py)
PILOTS: dict[str, dict] = {
    "gpu_fp32": {"task": HARD_TASK, "arch": GPU_SHAPE, "sft": GPU_SFT, "autocast": None},
    "gpu_bf16_outer": {"task": HARD_TASK, "arch": GPU_SHAPE, "sft": GPU_SFT,
                       "autocast": "bfloat16", "scope": "outer"},
    "gpu_bf16": {"task": HARD_TASK, "arch": GPU_SHAPE, "sft": GPU_SFT, "autocast": "bfloat16"},
    "cpu_shape_bf16": {"task": HARD_TASK, "arch": CPU_SHAPE, "sft": GPU_SFT,
                       "autocast": "bfloat16"},
}


def run_pilot(name: str, spec: dict, steps: int, eval_problems: int, stop_after: int | None,
              seed: int = 0) -> dict:
    """`steps` sets the schedule (warmup, then cosine to the end); `stop_after` stops the SFT
    earlier on that same schedule."""
    task = get_task("arithmetic", seed=0, **spec["task"])
    m_cfg, s_cfg = resolve_configs(spec["arch"], {**spec["sft"], "steps": steps})
    run_steps = min(steps, stop_after or steps)
    outer = spec.get("scope", "forward") == "outer"
    torch.manual_seed(seed)
    tokenizer = train_tokenizer(task.corpus(int(m_cfg["tokenizer_corpus"])), m_cfg["vocab_size"])
    model = build_tiny_model(tokenizer, arch=m_cfg["arch"], hidden_size=m_cfg["hidden_size"],
                             num_layers=m_cfg["num_layers"], num_heads=m_cfg["num_heads"],
                             intermediate_size=m_cfg["intermediate_size"],
                             max_position_embeddings=m_cfg["max_position_embeddings"],
                             tie_word_embeddings=m_cfg["tie_word_embeddings"], seed=seed)
    opt, sched = _optimizer(model, s_cfg, steps)
    bsz, losses, grad_norms = int(s_cfg["batch_size"]), [], []
    model.train()
    t0 = time.perf_counter()
    # No context at all where none is asked for: a disabled torch.autocast counts as a
    # nesting level and would keep an inner context's cache alive (src/models/precision.py).
    with autocast_context("cpu", spec["autocast"]) if outer else contextlib.nullcontext():
        for step in range(run_steps):
            batch = sft_batch(tokenizer, [task.problem(step * bsz + j) for j in range(bsz)],
                              pack_len=int(s_cfg["pack_len"]) or None)
            with contextlib.nullcontext() if outer else autocast_context("cpu", spec["autocast"]):
                loss = _sft_loss(model, batch, 0.0)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), float(s_cfg["grad_clip"]))
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
            grad_norms.append(float(gn))
            if step % 10 == 0 or step == run_steps - 1:
                print(f"[{name}] step {step} loss {losses[-1]:.3f} grad_norm {gn:.2f} "
                      f"lr {sched.get_last_lr()[0]:.1e} {time.perf_counter() - t0:.0f}s",
                      flush=True)
    sft_s = time.perf_counter() - t0
    model.eval()
    with autocast_context("cpu", spec["autocast"]):
        metrics = evaluate(model, tokenizer, task, task.eval_problems(eval_problems),
                           num_samples=1, temperature=1.0,
                           max_new_tokens=int(s_cfg["max_new_tokens"]), seed=seed)
    tail = losses[-max(1, run_steps // 10):]
    return {
        "pilot": name, "steps": run_steps, "schedule_steps": steps, "params_M": round(num_parameters(model) / 1e6, 1),
        "vocab": len(tokenizer), "autocast": spec["autocast"] or "fp32",
        "scope": spec.get("scope", "forward") if spec["autocast"] else "",
        "batch": bsz, "lr": s_cfg["lr"], "warmup": s_cfg["warmup_steps"],
        "task": "{min_terms}-{max_terms} terms, {max_digits} digit(s)".format(**spec["task"]),
        "loss_first": round(losses[0], 3), "loss_final": round(sum(tail) / len(tail), 3),
        "loss_at_30": round(losses[min(29, run_steps - 1)], 3),
        "grad_norm_mean": round(sum(grad_norms) / run_steps, 3),
        "greedy_accuracy": round(metrics["greedy_accuracy"], 3),
        "finished_fraction": round(metrics.get("finished_fraction", math.nan), 3),
        "eval_problems": eval_problems, "sft_s": round(sft_s), "threads": torch.get_num_threads(),
        "losses": losses,
    }


# What the figure calls each pilot: the shape, the autocast and where its context sat.
LABELS = {
    "gpu_bf16_outer": "77.6M, bf16, one context around the SFT (before the fix)",
    "gpu_bf16": "77.6M, bf16, one context per forward (the fix)",
    "gpu_fp32": "77.6M, fp32",
    "cpu_shape_bf16": "3.2M, bf16, one context per forward (the fix)",
}


def plot() -> Path:
    """Loss against SFT step: left, the 77.6M pilots on their 200-step schedule; right, the
    3.2M one on the recipe's 1500 steps. Each label carries the pilot's greedy accuracy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = {}
    for line in (HERE / "warm_start_plateau_curves.jsonl").read_text().splitlines():
        c = json.loads(line)
        curves[c["pilot"]] = c
    with (HERE / "warm_start_plateau.csv").open() as f:
        rows = {r["pilot"]: r for r in csv.DictReader(f)}
    colours = {"outer": "tab:red", "fp32": "tab:grey"}
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    for name, c in curves.items():
        ax = axes[0] if name.startswith("gpu") else axes[1]
        row = rows.get(name, {})
        label = (f"{LABELS.get(name, name)}: greedy {float(row['greedy_accuracy']):.2f}"
                 if row.get("greedy_accuracy") else LABELS.get(name, name))
        ax.plot(range(len(c["losses"])), c["losses"], lw=1.2, label=label,
                color=colours.get(name.rsplit("_", 1)[-1], "tab:blue"))
    for ax in axes:
        ax.axhline(2.02, color="black", lw=0.8, ls=":")
        ax.set_yscale("log")
        ax.set_xlabel("SFT step (64 problems a step)")
        ax.legend(fontsize=8, loc="lower left")
    axes[0].text(0, 2.1, "the H200's final loss, old code, 1500 steps", fontsize=8)
    axes[0].set_ylabel("SFT loss per solution token (nats, log scale)")
    axes[0].set_title("77.6M (8 x 896), the GPU recipe cut to 200 steps", fontsize=10)
    axes[1].set_title("3.2M (4 x 256), the GPU recipe's 1500 steps", fontsize=10)
    fig.suptitle("The warm start on the GPU check's task (2-8 terms of up to two digits), on CPU: "
                 "one bf16 autocast context around the whole SFT\nreuses step 0's weight casts "
                 "(only embeddings and norms learn); one context per forward learns; greedy "
                 "accuracy on 64 held-out problems", fontsize=10)
    out = HERE / "warm_start_plateau.png"
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("pilots", nargs="*", help=f"from {', '.join(PILOTS)}")
    p.add_argument("--plot", action="store_true", help="draw warm_start_plateau.png and stop")
    p.add_argument("--steps", type=int, default=150, help="the schedule's length")
    p.add_argument("--stop-after", type=int, default=None, help="stop early on that schedule")
    p.add_argument("--eval-problems", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--tag", default="", help="appended to the pilot's name in the table")
    args = p.parse_args(argv)
    if args.plot:
        print(plot())
        return
    unknown = [n for n in args.pilots if n not in PILOTS]
    if unknown or not args.pilots:
        p.error(f"name pilots from {', '.join(PILOTS)} (got {', '.join(unknown) or 'none'})")
    torch.set_num_threads(args.threads)
    for name in args.pilots:
        row = run_pilot(name, PILOTS[name], args.steps, args.eval_problems, args.stop_after)
        row["pilot"] += args.tag
        curve = {"pilot": row["pilot"], "losses": row.pop("losses")}
        table = HERE / "warm_start_plateau.csv"
        new = not table.exists()
        with table.open("a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(row))
            if new:
                w.writeheader()
            w.writerow(row)
        with (HERE / "warm_start_plateau_curves.jsonl").open("a") as f:
            f.write(json.dumps(curve) + "\n")
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
