"""The explanation pilots' table (pilots.yaml, X*): one row per pilot, from its exported run.

    python experiments/calibration/explain_pilots.py      # -> explain_pilots.md (and prints it)

The pilots test, on one seed, what a reviewer asks before believing a result against a peer
paper: the optimizer (AdamW where the grid uses SGD) and AReaL's own regime (one update per
rollout, data 4 versions old, eps 0.4). The columns are lag_pilots.py's (steady part: the
updates of steps >= K), with two changes: the ratio-histogram columns count ratios outside
[0.8, 1.2] whatever clip the run used (X05-X06 clip at [0.6, 1.4], so there they are not
the clip; `clip_frac` is), and three columns are added: the share of tokens whose behaviour
weight was over the cap (decoupled only), the largest behaviour weight, and greedy accuracy
as the mean of the last three evals (what the lag reports compare).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

if __package__ in (None, ""):
    import sys

    sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]

import yaml  # noqa: E402
from lag_pilots import HERE, row, write_table  # noqa: E402

from src.run_files import has_metrics, metrics_records  # noqa: E402

RENAMED = {"clip binds (A != 0)": "outside [0.8,1.2] against A (A != 0)"}


def extra(run_dir: Path, delay: int) -> dict:
    records = metrics_records(run_dir)
    updates = [r for r in records if r["kind"] == "update" and not r.get("skipped") and r["step"] >= delay]
    evals = [r["greedy_accuracy"] for r in records if r["kind"] == "eval"]
    capped = [u["behav_weight_capped_frac"] for u in updates if u.get("behav_weight_capped_frac") is not None]
    weights = [u["behav_weight_max"] for u in updates if u.get("behav_weight_max") is not None]
    return {
        "over the cap": f"{statistics.mean(capped):.2%}" if capped else "-",
        "max behaviour weight": f"{max(weights):.2f}" if weights else "-",
        "greedy, last 3 evals": f"{statistics.mean(evals[-3:]):.3f}",
    }


def main() -> None:
    rows = []
    for d in sorted((HERE / "runs").glob("X*")):
        if not has_metrics(d / "seed0"):
            continue
        run_dir = d / "seed0"
        status = json.loads((run_dir / "status.json").read_text())
        delay = int((yaml.safe_load((run_dir / "config.yaml").read_text())["offpolicy"] or {}).get("delay") or 0)
        # a pilot stopped before its delay queue's data arrived is read over every update
        stopped_early = status["status"] != "finished" and status["last_step"] < delay
        start = 0 if stopped_early else delay
        base = row(d.name, run_dir, steady_from=start)
        if status["status"] != "finished":
            base["pilot"] += f" (stopped after step {status['last_step']})"
        base["K"] = f"{delay} (read from step {start})" if stopped_early else base["K"]
        rows.append({RENAMED.get(k, k): v for k, v in base.items()} | extra(run_dir, start))
    if not rows:
        raise SystemExit("no exported X* pilot under experiments/calibration/runs: run "
                         "`python experiments/calibration/run_pilots.py X01_adamw_1x ...` first")
    write_table(rows, "explain_pilots",
                "Explanation pilots (ppo, seed 0, the shipped warm start, portable numerics)", "X*")

if __name__ == "__main__":
    main()
