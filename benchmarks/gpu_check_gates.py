"""What the GPU check must see before it reports a timing: a warm start that learned, and a
testbed run whose gain is read against the committed seeds.

- `warm_start_gate`: the warm start's greedy accuracy and the share of its responses that
  end must reach the size's floor (`WARM_START_FLOORS`); under it the check stops before
  any RL run, since a model that never stops talking earns no reward and times nothing.
- `testbed_comparison`: one run of the ramble testbed's committed 4x cell, on the check's
  device, against that cell's committed 8 seeds (experiments/testbed_grid): its gain (final
  window minus the eval at step 0, as the reports compute it) and the 95% prediction
  interval of one more seed, mean +- t(0.975, n-1) * sd * sqrt(1 + 1/n): the interval the
  reports show is the mean's, too narrow for a single seed, so it is printed beside the
  verdict, not used for it. A run whose config
  differs from the committed cell's (beyond device, threads, logging and paths) is reported
  beside the interval, not judged by it.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TESTBED_CELL = REPO / "experiments" / "testbed_grid" / "ramble_4x"
TESTBED_EXPERIMENT = "ramble_4x"
# What may differ from the committed cell for its interval to judge the run: the device is
# the point, the thread count splits CPU reductions only, and the run is one more seed of
# the cell (keys that change no number, such as logging and paths, src/run_vocab.py leaves
# out itself).
IGNORED_KEYS = ("device", "train.threads", "seed")

# Greedy accuracy on the warm start's held-out problems, and the share of its sampled
# responses that end inside max_new_tokens. The gpu size must learn the harder mix well
# enough that RL groups mix right and wrong answers; the cpu dry run's 2-term sums reach
# about 0.8. The smoke size trains 8 steps and learns nothing, so its floor is 0 (the test
# raises it with --min-greedy-accuracy to see the check refuse).
WARM_START_FLOORS: dict[str, dict[str, float]] = {
    "gpu": {"greedy_accuracy": 0.10, "finished_fraction": 0.90},
    "cpu": {"greedy_accuracy": 0.10, "finished_fraction": 0.90},
    "smoke": {"greedy_accuracy": 0.0, "finished_fraction": 0.0},
}


def warm_start_gate(warm: dict[str, Any], floor: dict[str, float]) -> list[str]:
    """What is under the floor, one sentence each; empty when the warm start passes."""
    problems = []
    for key, label in (("greedy_accuracy", "greedy accuracy"),
                       ("finished_fraction", "share of responses that end")):
        value = warm.get(key)
        if value is None or not math.isfinite(value) or value < floor[key]:
            problems.append(f"the warm start's {label} is {value} (floor {floor[key]})")
    return problems


def config_differences(run_dir: Path, committed_run: Path) -> list[str]:
    """Config keys that can change the numbers and differ between two run dirs (configs
    brought to today's layout first), beyond the device and the thread count."""
    from src.run_dir import config_differences as differences
    from src.run_dir import stored_config

    ours, theirs = stored_config(run_dir), stored_config(committed_run)
    if ours is None or theirs is None:
        return [f"no readable config.yaml in {run_dir if ours is None else committed_run}"]
    return [f"{key}: committed {old!r}, this run {new!r}"
            for key, old, new in differences(theirs, ours) if key not in IGNORED_KEYS]


def prediction_interval(values: list[float]) -> tuple[float, float, float, int]:
    """(mean, low, high, n): where one more draw falls with 95% probability (normal model)."""
    from analysis.core.stats import t975

    n = len(values)
    if n < 2:
        raise ValueError(f"a prediction interval needs at least 2 committed seeds, got {n}")
    mean = statistics.fmean(values)
    half = t975(n - 1) * statistics.stdev(values) * math.sqrt(1 + 1 / n)
    return mean, mean - half, mean + half, n


def run_gains(roots: list[Path]) -> list[dict[str, Any]]:
    """Per run: seed, sampled and greedy gain, computed as the reports compute them."""
    from analysis.core.loader import load_runs
    from analysis.core.summary import run_summary

    summary = run_summary(load_runs(roots))
    return [{"seed": int(r.seed), "gain_sampled_acc": float(r.gain_sampled_acc),
             "gain_greedy_acc": float(r.gain_greedy_acc)} for r in summary.itertuples()]


def committed_cell(method: str, cell_root: Path = TESTBED_CELL) -> Path:
    dirs = sorted((cell_root / method).glob("*/seed0"))
    if len(dirs) != 1:
        raise FileNotFoundError(f"expected one committed {method} cell under {cell_root / method}, "
                                f"found {len(dirs)}")
    return dirs[0].parent


def testbed_comparison(method: str, run_dir: Path,
                       cell_root: Path = TESTBED_CELL) -> dict[str, Any]:
    """The run's gains read against the committed cell of `method` (see the module doc)."""
    from analysis.core.stats import mean_ci

    cell = committed_cell(method, cell_root)
    differs = config_differences(run_dir, cell / "seed0")
    ours = run_gains([run_dir])
    if len(ours) != 1:
        raise ValueError(f"{run_dir} holds {len(ours)} runs, not one")
    seeds = run_gains(sorted(cell.glob("seed*")))
    out: dict[str, Any] = {"method": method, "committed_cell": str(cell.relative_to(REPO)),
                           "committed_seeds": [s["seed"] for s in seeds],
                           "config_differs_in": differs}
    for metric in ("gain_sampled_acc", "gain_greedy_acc"):
        committed = [s[metric] for s in seeds]
        mean, low, high, n = prediction_interval(committed)
        _, ci_low, ci_high, _ = mean_ci(committed)
        value = ours[0][metric]
        out[metric] = {"run": value, "committed_mean": mean, "committed_ci": [ci_low, ci_high],
                       "prediction_low": low, "prediction_high": high, "n": n,
                       "within": (low <= value <= high) if not differs else None}
    out["verdict"] = ("config differs from the committed cell: reported beside its interval"
                      if differs else
                      "within the committed 95% prediction interval"
                      if out["gain_sampled_acc"]["within"] else
                      "OUTSIDE the committed 95% prediction interval")
    return out
