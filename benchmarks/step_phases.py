"""Where a step's time goes, read from run dirs that already exist: no run is started.

Every step record carries its phases on the run's own clock (`time_rollout_s`,
`time_behavior_s`, `time_update_s`, and `time_telemetry_s`: building the token rows and
writing the step's Parquet file), so the committed grids measure them over thousands of
steps. One row per experiment: steps, mean step, and each phase's share of the summed step
time (a share of the sum, so long steps weigh as much as they cost).

    python benchmarks/step_phases.py experiments/testbed_grid experiments/smol_grid
"""

from __future__ import annotations

import argparse

import pandas as pd

PHASES = {"time_rollout_s": "rollout", "time_behavior_s": "behaviour pass",
          "time_update_s": "updates", "time_telemetry_s": "token rows"}


def phase_shares(steps: pd.DataFrame) -> pd.DataFrame:
    """Per experiment: steps, mean step seconds and each phase's share of the summed step."""
    missing = [c for c in ["experiment", "time_step_s", *PHASES] if c not in steps.columns]
    if missing:
        raise ValueError(f"step records lack {missing}: runs made before the phases were "
                         "timed cannot say where their time went")
    timed = steps.dropna(subset=["time_step_s"])
    if timed.empty:
        raise ValueError("no step record has time_step_s")
    by_experiment = timed.groupby("experiment")
    sums, counts = by_experiment[["time_step_s", *PHASES]].sum(), by_experiment.size()
    table = pd.DataFrame({"steps": counts, "mean step s": sums["time_step_s"] / counts})
    for col, name in PHASES.items():
        table[name] = sums[col] / sums["time_step_s"]
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("roots", nargs="+", help="dirs searched for run dirs")
    args = parser.parse_args(argv)
    from analysis.core.loader import load_runs

    runs = load_runs(args.roots)
    if not runs.runs:
        raise SystemExit(f"no run dirs under {args.roots}")
    table = phase_shares(runs.steps)
    shown = table.copy()
    shown["mean step s"] = shown["mean step s"].map("{:.2f}".format)
    for name in PHASES.values():
        shown[name] = shown[name].map("{:.2%}".format)
    print(shown.to_string())


if __name__ == "__main__":
    import _setup  # noqa: F401 - this checkout's analysis first on sys.path

    main()
