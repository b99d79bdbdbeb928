"""One markdown row per run dir: the columns of the per-part tables in a sweep's README.

    python -m analysis.reports.run_rows experiments/smol_grid/smol_4x/*/*/seed2

Each row: method, seed, sampled and greedy accuracy (step 0 -> final, final = the mean of
the last three evals, as the report's), the clip fraction over every update weighted by
its loss tokens, the mean entropy of the first step -> the mean of the last five steps'
means, the clip bounds the updates used with how many updates used each, and `wall_time_s`
in minutes. Read from metrics.jsonl (metrics.jsonl.gz in an export) and meta.json, which an
export keeps whole, so an exported run gives the numbers its run dir gave.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import numpy as np

from analysis.core.final import FINAL_EVALS  # the report's final window
from src.config_fields import ConfigError
from src.run_files import EITHER, metrics_file, metrics_records

LAST_STEPS = 5


def records(run_dir: Path) -> list[dict]:
    try:
        path = metrics_file(run_dir)
    except ConfigError as e:  # both forms: the message says which to delete
        raise SystemExit(str(e)) from None
    if path is None:
        raise SystemExit(f"{run_dir}: no {EITHER}; give run dirs (…/seedN)")
    return metrics_records(run_dir)


def _start_and_final(evals: list[dict], key: str) -> tuple[float, float]:
    values = [e[key] for e in evals]
    return values[0], float(np.mean(values[-FINAL_EVALS:]))


def row(run_dir: Path) -> dict:
    """The table's numbers for one run."""
    recs = records(run_dir)
    evals = [r for r in recs if r["kind"] == "eval"]
    steps = [r for r in recs if r["kind"] == "step"]
    updates = [r for r in recs if r["kind"] == "update" and not r.get("skipped")]
    if not evals or not steps or not updates:
        raise SystemExit(f"{run_dir}: needs evals, steps and updates in metrics.jsonl "
                         f"(has {len(evals)}, {len(steps)}, {len(updates)})")
    tokens = np.array([u["tokens_in_loss"] for u in updates], dtype=float)
    clip = np.array([u["clip_frac"] for u in updates], dtype=float)
    entropy = [s["entropy_mean"] for s in steps if s.get("entropy_mean") is not None]
    bounds = Counter((u.get("c_low"), u.get("c_high")) for u in updates)
    meta = json.loads((run_dir / "meta.json").read_text())
    return {
        "method": meta.get("method"), "seed": meta.get("seed"),
        "sampled": _start_and_final(evals, "sampled_accuracy"),
        "greedy": _start_and_final(evals, "greedy_accuracy"),
        "clip": float((clip * tokens).sum() / tokens.sum()) if tokens.sum() else float("nan"),
        "entropy": (entropy[0], float(np.mean(entropy[-LAST_STEPS:]))),
        "bounds": sorted(bounds.items(), key=lambda kv: -kv[1]),
        "minutes": (meta.get("wall_time_s") or float("nan")) / 60,
    }


def _bound(value) -> str:
    """A clip bound as the READMEs write it: 0.6, 1.28, 3.0 (None: the method has none)."""
    if value is None:
        return "-"
    text = f"{value:g}"
    return text if "." in text else f"{text}.0"


def markdown(r: dict) -> str:
    bounds = ", ".join(f"[{_bound(lo)}, {_bound(hi)}] ({n})" for (lo, hi), n in r["bounds"])
    return (f"| {r['method']} | {r['seed']} | {r['sampled'][0]:.3f} -> {r['sampled'][1]:.3f} | "
            f"{r['greedy'][0]:.3f} -> {r['greedy'][1]:.3f} | {100 * r['clip']:.2f}% | "
            f"{r['entropy'][0]:.2f} -> {r['entropy'][1]:.2f} | {bounds} | {r['minutes']:.1f} |")


HEAD = ("| method | seed | sampled, step 0 -> final | greedy, step 0 -> final | clip | "
        "entropy, first step -> last 5 | bounds used (updates) | run, min |\n"
        "|---|---|---|---|---|---|---|---|")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run dirs (…/seedN)")
    args = parser.parse_args(argv)
    print(HEAD)
    for run_dir in args.runs:
        print(markdown(row(run_dir)))


if __name__ == "__main__":
    main()
