"""The calibration table: one row per pilot, from the exported runs in runs/<pilot>/seed<N>/.

    python experiments/calibration/summarize.py     # -> pilots.csv, table.md (and prints it)

Per run: held-out accuracy (sampled and greedy) at the first and last eval and its gain,
behaviour-policy entropy and response length (mean of the first and last 6 steps), clip
fraction and mean |log ratio| over the stale updates (update index >= 1), and how BAPO's
bound search ended among stale updates (bapo-objective runs). Over seeds: mean and the
95% Student-t half-width (a single seed gets no interval).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
from analysis.core.search_outcomes import outcome  # noqa: E402
from analysis.core.stats import mean_ci  # noqa: E402
from src.algorithms import METHODS  # noqa: E402 - bapo's traits name its search records
from src.run_files import has_metrics, metrics_records  # noqa: E402

EDGE = 6  # steps averaged at each end of a run
ACCURACY = ["sampled_accuracy", "greedy_accuracy"]


def run_summary(run_dir: Path) -> dict:
    records = metrics_records(run_dir)
    kind = pd.DataFrame(records).groupby("kind")
    steps, evals = kind.get_group("step"), kind.get_group("eval").sort_values("step")
    updates = kind.get_group("update")
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    meta = json.loads((run_dir / "meta.json").read_text())
    # pilots that timed steps ran with both evals off: their eval records carry no accuracy
    evals = evals.reindex(columns=[*evals.columns.difference(ACCURACY), *ACCURACY])
    first, last = evals.iloc[0], evals.iloc[-1]
    stale = updates[updates["update"] >= 1]
    head, tail = steps.head(EDGE), steps.tail(EDGE)
    row = {
        "eval_n": int(first["n_problems"]),
        "steps": int(steps["step"].max()) + 1,
        "acc0": first["sampled_accuracy"], "acc_end": last["sampled_accuracy"],
        "gain": last["sampled_accuracy"] - first["sampled_accuracy"],
        "greedy0": first["greedy_accuracy"], "greedy_end": last["greedy_accuracy"],
        "acc_min": evals["sampled_accuracy"].min(),
        "H_first": head["entropy_mean"].mean(), "H_last": tail["entropy_mean"].mean(),
        "len_first": head["response_length_mean"].mean(),
        "len_last": tail["response_length_mean"].mean(),
        "reward_first": head["reward_mean"].mean(), "reward_last": tail["reward_mean"].mean(),
        "degenerate": (steps["degenerate_groups"] / steps["num_groups"]).mean(),
        "clip_stale": stale["clip_frac"].mean() if len(stale) else 0.0,
        "abs_logr_stale": stale["abs_log_ratio_mean"].mean() if len(stale) else 0.0,
        "kl_stale": stale["kl_k3"].mean() if len(stale) else 0.0,
        "grad_norm": updates["grad_norm"].mean(),
        "wall_s": meta.get("wall_time_s"),
    }
    row["H_drop"] = row["H_first"] - row["H_last"]
    if config["method"]["objective"] == "bapo" and len(stale):
        shares = outcome(stale, METHODS["bapo"].traits).value_counts(normalize=True)
        row.update({f"bapo_{k.replace(', ', '_').replace(' ', '_')}": float(shares.get(k, 0.0))
                    for k in ("at start", "moved, reached", "not reached", "undefined")})
    return row


def _ci(values: pd.Series) -> float:
    _, low, high, _ = mean_ci(values)
    return (high - low) / 2


def main() -> None:
    spec = yaml.safe_load((HERE / "pilots.yaml").read_text())["pilots"]
    rows = []
    for name in spec:
        for seed_dir in sorted((HERE / "runs" / name).glob("seed*")):
            if has_metrics(seed_dir):
                rows.append({"pilot": name, "seed": int(seed_dir.name[4:]), **run_summary(seed_dir)})
    if not rows:
        raise SystemExit("no exported pilots yet")
    per_run = pd.DataFrame(rows)
    per_run.to_csv(HERE / "pilots.csv", index=False, float_format="%.4f")
    cols = ["acc0", "acc_end", "gain", "greedy_end", "acc_min", "H_first", "H_last", "len_last",
            "degenerate", "clip_stale", "abs_logr_stale", "wall_s"]
    cols += [c for c in per_run.columns if c.startswith("bapo_")]
    lines = ["| pilot | seeds | " + " | ".join(cols) + " |", "|---" * (len(cols) + 2) + "|"]
    for name, g in per_run.groupby("pilot", sort=False):
        cells = []
        for c in cols:
            m, h = g[c].mean(), _ci(g[c])
            cells.append(f"{m:.3g}" if math.isnan(h) else f"{m:.3g} ± {h:.2g}")
        lines.append(f"| {name} | {len(g)} | " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    (HERE / "table.md").write_text(table)
    print(table)



if __name__ == "__main__":
    main()
