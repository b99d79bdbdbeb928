"""The mismatch grid's report: is BAPO robust to the training-inference mismatch?

    python analysis/mismatch_report.py --runs experiments/mismatch_grid experiments/testbed_grid \
        --out figures/mismatch_grid

Reads the runs with a low-precision sampler (`rollout.precision` bf16, fp16 or int8) and
every run of their methods and experiments under the roots (their fp32 partners: here
testbed_grid's ramble_4x cells, the same seeds), labels each by its setting
(`<precision>/<correction>`), and writes <out>/{REPORT.md, claims.csv, accuracy.csv,
diagnostics.csv, fig_mismatch_*.png}: the claim rows of analysis/claims/mismatch.py (declared
in experiments/sweeps.yaml before the runs) judged paired by seed with Holm's correction,
final accuracy by method and setting (sampled, the declared primary metric, then greedy),
the mismatch's diagnostics per setting, and the figures (the gap and chi-square per step,
accuracy, the IS weights).

Exit code 0 when the report is written; 2 with one `config error:` line for bad input: a
--runs folder that does not exist, or no run with a low-precision sampler under the roots.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # `python analysis/mismatch_report.py` puts only analysis/ there
    sys.path.insert(0, str(REPO))

from analysis.reports.mismatch import write_report  # noqa: E402
from analysis.reports.sweep_cli import run_report_cli  # noqa: E402

TITLE = "The ramble testbed at 4x with an int8 sampler: the mismatch, its corrections and BAPO"


def main(argv: list[str] | None = None) -> int:
    return run_report_cli(argv, description=__doc__.split("\n\n")[0], write_report=write_report,
                          runs=[REPO / "experiments/mismatch_grid", REPO / "experiments/testbed_grid"],
                          out=REPO / "figures/mismatch_grid", title=TITLE)


if __name__ == "__main__":
    sys.exit(main())
