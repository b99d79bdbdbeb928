"""The clip_family sweep's report: does any 2025-26 clip rule beat bapo or ppo?

    python analysis/clip_family_report.py --runs experiments/clip_family experiments/mismatch_grid \
        experiments/testbed_grid experiments/testbed_lags --out figures/clip_family

Reads the finished runs of sapo, dppo_tv, gppo, ce_gppo, dcpo, aspo, sapo at token-mean
(labelled `sapo (token-mean)`) and the reference methods ppo, clip_higher and bapo at the
sweep's experiments (ramble_4x, ramble_delay_4) with the fp32 sampler and no correction,
nothing else under the roots, pairing within the sweep's CPU family (a reference cell made
on another family is set apart and shown beside), and writes
<out>/{REPORT.md, claims.csv, accuracy.csv, regime.csv, fig_clip_family_forest.png}: the
claim rows of analysis/claims/clip_family.py (declared in experiments/sweeps.yaml before the
runs) judged paired by seed with Holm's correction over all 26, final accuracy by method and
experiment (greedy, the declared primary metric, then sampled), each rule's regime (clip or
mask share by advantage sign, the new clip states, the positive share of the gradient
against bapo's rho0, the entropy drift) and the paired-difference forest.

Exit code 0 when the report is written; 2 with one `config error:` line for bad input: a
--runs folder that does not exist, or no finished run of the clip family under the roots.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # `python analysis/clip_family_report.py` puts only analysis/ there
    sys.path.insert(0, str(REPO))

from analysis.reports.clip_family import write_report  # noqa: E402
from analysis.reports.sweep_cli import run_report_cli  # noqa: E402

TITLE = "The 2025-26 clip family on the ramble testbed at 4x and at lag 16-19, beside ppo and bapo"
# The sweep and its references: the mismatch grid's fp32 cells (Intel, the sweep's family) at
# 4x and clip_family_refs' at lag 16-19 (exported into experiments/clip_family), paired; the
# AMD cells of testbed_grid and testbed_lags, set apart where those exist.
ROOTS = ("experiments/clip_family", "experiments/mismatch_grid", "experiments/testbed_grid",
         "experiments/testbed_lags")


def main(argv: list[str] | None = None) -> int:
    return run_report_cli(argv, description=__doc__.split("\n\n")[0], write_report=write_report,
                          runs=[REPO / r for r in ROOTS],
                          out=REPO / "figures/clip_family", title=TITLE)


if __name__ == "__main__":
    sys.exit(main())
