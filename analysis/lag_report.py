"""The lag sweeps' report: figures, tables and claim rows from the lag runs.

    python analysis/lag_report.py                         # experiments/lag_results -> figures/lag
    python analysis/lag_report.py --runs experiments/lag_results_large --out figures/lag_large \
        --title "Lag sweeps at 64-259 updates, replay and partial rollouts (warm-start build 4eb7f2706392ef39)"
    python analysis/lag_report.py --runs experiments/lag_results_guess --out figures/lag_guess \
        --title "Guess and check at 16-19 updates (warm-start build of guess_check)"
    python analysis/lag_report.py --runs runs --out /tmp/lag

Reads the lag sweeps' runs (experiments/sweeps.yaml: lag4, lag16, lag64, corrections,
large_lag, large_lag_peers, scenarios, start_bounds). Every run must come from one
warm-start build, told apart by the weights digest in meta.json or, for runs without one,
by the step-0 greedy accuracy (analysis/core/lags.py; the report stops and names the runs
otherwise), so runs made on another machine, or on another task, go to a root and a report
of their own. One-seed pilots never sit beside the sweeps: a cell with one seed where the
report's cells have more is left out of the sweep tables and figures and listed apart, and
the calibration pilots (experiments/calibration/runs/L*) come in only with `--pilots`, in a
figure of their own (lag_pilot_ratios.png). Writes <out>/{lag_*.png, REPORT.md,
lag_summary.csv, lag_claims.csv, lag_search.csv, lag_paired.csv} and, where a method also
ran with other parameters (an ablation such as `start_bounds`), lag_variants.csv (default
figures/lag/). Final accuracy is the mean of a run's last three evals (analysis/core/final.py);
the claims get Holm's correction over the report's tested rows (analysis/core/multiplicity.py).

Exit code 0 when the report is written; 2 with one `config error:` line, as `python -m
src.run`, for bad input: a --runs folder that does not exist, no usable run under the
roots, or runs of more than one warm-start build.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # `python analysis/lag_report.py` puts only analysis/ there
    sys.path.insert(0, str(REPO))

from analysis.core.loader import load_runs  # noqa: E402
from analysis.figures.contract import Options  # noqa: E402
from analysis.reports.lag import DEFAULT_RUNS, write  # noqa: E402
from src.config_fields import config_exit  # noqa: E402 - exit 2 and one line, as src/run.py

CALIBRATION_PILOTS = sorted((REPO / "experiments" / "calibration" / "runs").glob("L[0-9]*"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", nargs="+", type=Path, default=[DEFAULT_RUNS])
    p.add_argument("--pilots", nargs="*", default=None,
                   help="one-seed pilot run dirs, drawn in a figure of their own "
                        "(lag_pilot_ratios.png), never in the sweeps' ('calibration': "
                        "experiments/calibration/runs/L*; default and 'none': left out)")
    p.add_argument("--out", type=Path, default=REPO / "figures" / "lag")
    p.add_argument("--formats", nargs="+", default=["png"])
    p.add_argument("--title", default="Lag sweeps: where the clip binds",
                   help="the report's heading (one report per root: say what the root holds)")
    args = p.parse_args(argv)
    missing = [str(r) for r in args.runs if not r.exists()]
    if missing:
        config_exit(f"--runs: no such folder: {', '.join(missing)}")
    pilot_dirs = ([] if args.pilots in (None, ["none"]) else
                  CALIBRATION_PILOTS if args.pilots == ["calibration"] else
                  [Path(x) for x in args.pilots])
    runs = load_runs(args.runs)
    unfinished = [r.run_id for r in runs.runs if r.status != "finished"]
    if unfinished:  # a running run's last eval is not its final one
        print(f"left out {len(unfinished)} unfinished run(s): {', '.join(unfinished)}")
        runs = runs.subset(lambda r: r.status == "finished")
    pilots = load_runs(pilot_dirs) if pilot_dirs else None
    try:
        path = write(runs, pilots, Options(out=args.out, formats=tuple(args.formats)), args.title)
    except ValueError as e:
        raise SystemExit(f"lag report: {e}") from None
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
