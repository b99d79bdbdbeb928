"""The lag pilots' table (pilots.yaml, L*): one row per pilot, from its exported run.

    python experiments/calibration/lag_pilots.py      # -> lag_pilots.md (and prints it)

Over the run's steady part, the updates of steps >= K (their data came from the run's own
policy, not the initial weights a delay queue starts with): mean and max lag in updates,
ppo's logged clip fraction (of all loss tokens, zero-advantage ones included), the share of
signed tokens where the clip binds (A>0 and r>1.2 or A<0 and r<=0.8, from the per-update
ratio histogram), the same among A>0 and A<0 tokens, mean |log r| and
KL k3 against the behaviour policy, the positive share of the gradient (rho at [0.8, 1.2]),
the share of updates whose gradient norm was clipped and the mean norm; entropy of the
first and last 5 steps; held-out accuracy (greedy / sampled) at step 0 and at the end.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
if str(HERE.parents[1]) not in sys.path:  # run as a script, only experiments/calibration is there
    sys.path.insert(0, str(HERE.parents[1]))

from src.run_files import has_metrics, metrics_records  # noqa: E402 - after the path above

POS_CLIPPED_BINS, NEG_CLIPPED_BINS = (5, 6, 7), (0, 1, 2)  # r > 1.2 ; r <= 0.8 (bins of drift.py)


def row(name: str, run_dir: Path, steady_from: int | None = None) -> dict:
    """`steady_from` overrides the first step read (default K, the delay)."""
    records = metrics_records(run_dir)
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    delay = (cfg.get("offpolicy") or {}).get("delay") or 0
    start = delay if steady_from is None else steady_from
    updates = [r for r in records if r["kind"] == "update" and not r.get("skipped") and r["step"] >= start]
    steps = [r for r in records if r["kind"] == "step" and r.get("entropy_mean") is not None]
    evals = [r for r in records if r["kind"] == "eval"]
    pos = [sum(c) for c in zip(*(u["ratio_hist_pos"] for u in updates), strict=True)]
    neg = [sum(c) for c in zip(*(u["ratio_hist_neg"] for u in updates), strict=True)]
    pos_clip, neg_clip = sum(pos[i] for i in POS_CLIPPED_BINS), sum(neg[i] for i in NEG_CLIPPED_BINS)

    def mean(key: str) -> float:
        return statistics.mean(float(u[key]) for u in updates if u.get(key) is not None)

    first, last = evals[0], evals[-1]
    return {
        "pilot": name, "K": delay, "steady updates": len(updates),
        "lag mean (max)": f"{mean('policy_lag'):.1f} ({max(u['policy_lag_max'] for u in updates)})",
        "clip_frac (all tokens)": f"{mean('clip_frac'):.2%}",
        "clip binds (A != 0)": f"{(pos_clip + neg_clip) / (sum(pos) + sum(neg)):.2%}",
        "A>0 r>1.2": f"{pos_clip / sum(pos):.2%}", "A<0 r<0.8": f"{neg_clip / sum(neg):.2%}",
        "mean abs log r": f"{mean('behav_abs_log_ratio_mean'):.3f}",
        "KL k3": f"{mean('behav_kl_k3'):.4f}", "rho": f"{mean('rho'):.3f}",
        "grad-norm clipped": f"{mean('grad_clipped'):.0%}", "grad norm": f"{mean('grad_norm'):.2f}",
        "entropy first/last 5": f"{statistics.mean(s['entropy_mean'] for s in steps[:5]):.3f} / "
                                f"{statistics.mean(s['entropy_mean'] for s in steps[-5:]):.3f}",
        "greedy 0 -> end": f"{first['greedy_accuracy']:.3f} -> {last['greedy_accuracy']:.3f}",
        "sampled 0 -> end": f"{first['sampled_accuracy']:.3f} -> {last['sampled_accuracy']:.3f}",
    }


def write_table(rows: list[dict], name: str, title: str, pattern: str) -> None:
    """`<name>.md` beside this file: a title, where the rows come from, the table; printed too."""
    header = list(rows[0])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(r[k]) for k in header) + " |" for r in rows]
    text = "\n".join(lines)
    (HERE / f"{name}.md").write_text(
        f"# {title}\n\nWritten by `{name}.py` from `runs/{pattern}/seed0` (pilots.yaml says what "
        "each asked and expected). Steady part: the updates of steps >= K.\n\n" + text + "\n")
    print(text)


def main() -> None:
    rows = [row(d.name, d / "seed0") for d in sorted((HERE / "runs").glob("L*"))
            if has_metrics(d / "seed0")]
    write_table(rows, "lag_pilots", "Lag pilots (ppo, delay queue, 4 updates per rollout, seed 0)", "L*")


if __name__ == "__main__":
    main()
