"""The calibration figure: how each pilot's held-out sampled accuracy moved, and by how much.

    python experiments/calibration/plot.py      # -> calibration.png (from runs/<pilot>/seed0)

Left: held-out sampled accuracy against step for the on-policy (1x) pilots on the default
task and warm start, AdamW in blue shades, SGD with momentum in orange shades. Right: every
pilot's gain (last eval minus first) beside the +0.15 the testbed criterion asks for.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import yaml  # noqa: E402

HERE = Path(__file__).resolve().parent
if str(HERE.parents[1]) not in sys.path:  # run as a script, only experiments/calibration is there
    sys.path.insert(0, str(HERE.parents[1]))

from src.run_files import has_metrics, metrics_records  # noqa: E402 - after the path above

TARGET_GAIN = 0.15
# The curves drawn on the left: the optimizer and lr series on the default task (seed 0).
CURVES = {
    "D00_lr5e-5": "AdamW 5e-5 (old default)",
    "D01_lr1e-4": "AdamW 1e-4",
    "D06_lr2e-4": "AdamW 2e-4",
    "D03_lr1e-4_p64": "AdamW 1e-4, 64 prompts",
    "O05_sgd0.003_80steps": "SGD 0.003",
    "O06_sgd0.005_60steps": "SGD 0.005 (new default lr)",
    "O04_sgd0.01": "SGD 0.01",
    "O01_sgd0.03": "SGD 0.03",
}


def evals(pilot: str, seed: int = 0) -> list[tuple[int, float]]:
    rows = metrics_records(HERE / "runs" / pilot / f"seed{seed}")
    return [(r["step"], r["sampled_accuracy"]) for r in rows if r.get("kind") == "eval"]


def colour(label: str, i: int):
    cmap = plt.get_cmap("Blues" if label.startswith("AdamW") else "Oranges")
    return cmap(0.45 + 0.15 * (i % 4))


def main() -> None:
    pilots = list(yaml.safe_load((HERE / "pilots.yaml").read_text())["pilots"])
    done = [p for p in pilots if has_metrics(HERE / "runs" / p / "seed0")]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2), width_ratios=[1, 1.15])
    counts = {"A": 0, "S": 0}
    for pilot, label in CURVES.items():
        if pilot not in done:
            continue
        kind = "A" if label.startswith("AdamW") else "S"
        steps, acc = zip(*evals(pilot), strict=True)
        left.plot(steps, acc, marker="o", ms=3.5, lw=1.6, color=colour(label, counts[kind]),
                  label=label, ls="-" if kind == "S" else "--")
        counts[kind] += 1
    start = evals("O03_sgd0.003")[0][1] if "O03_sgd0.003" in done else None
    if start is not None:
        left.axhline(start + TARGET_GAIN, color="k", lw=0.8, ls=":")
        left.text(1, start + TARGET_GAIN + 0.006, "step-0 accuracy + 0.15 (criterion a)",
                  fontsize=8)
    left.set_xlabel("RL step (16 prompts x 8 samples per step, staleness 1x, ppo)")
    left.set_ylabel("held-out sampled accuracy (256 problems x 4)")
    left.set_title("On-policy learning by optimizer and lr (seed 0)")
    left.legend(fontsize=8, loc="upper left", ncol=2)
    left.set_ylim(0, 0.75)

    gains = []
    for pilot in done:
        curve = evals(pilot)
        gains.append((f"{pilot} (from {curve[0][1]:.2f})", curve[-1][1] - curve[0][1]))
    names = [g[0] for g in gains][::-1]
    values = [g[1] for g in gains][::-1]
    colours = ["tab:orange" if ("sgd" in n) else "tab:blue" for n in names]
    right.barh(names, values, color=colours)
    right.axvline(TARGET_GAIN, color="k", lw=0.8, ls=":")
    right.axvline(0, color="k", lw=0.6)
    right.set_xlabel("gain in held-out sampled accuracy, last eval - first (seed 0);\n"
                     "(from x): accuracy at step 0, which depends on the pilot's task and warm start")
    right.set_title("Every pilot (blue: AdamW, orange: SGD; dotted: the +0.15 target)")
    right.tick_params(axis="y", labelsize=7.5)
    fig.suptitle("Testbed calibration (16 prompts x 8 samples per step unless named): no pilot "
                 "reaches +0.15; SGD with momentum at lr 0.003-0.005 gains steadily, AdamW at "
                 ">= 1e-4 loses accuracy", fontsize=10)
    fig.tight_layout()
    out = HERE / "calibration.png"
    fig.savefig(out, dpi=130)
    print(out)


if __name__ == "__main__":
    main()
