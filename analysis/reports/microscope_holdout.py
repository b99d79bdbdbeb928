"""A microscope study's holdout checks: a reading found exploring some trunks, written down
(dated, as the study's `holdout` in experiments/sweeps.yaml) before the other trunks' rows were
read, and judged on those other trunks alone (each check's `where` names them).

They are not among the study's claims: no Holm step, and a rule of their own, weaker than a
verdict's, since a holdout has few trunks: "replicated" when the cluster-bootstrap interval
excludes 0 on the paper's side and every trunk's own mean has the paper's sign;
"contradicted" when the interval excludes 0 on the other side; else "not replicated".
"""

from __future__ import annotations

import pandas as pd

from analysis.claims.microscope import DIRECTIONS, Claim, differences
from analysis.core.cluster_bootstrap import Boot, cluster_bootstrap
from analysis.reports.markdown import fmt_effect


def outcome(boot: Boot, direction: int) -> str:
    if boot.n == 0:
        return "no data yet"
    side = boot.low > 0 if direction > 0 else boot.high < 0
    other = boot.high < 0 if direction > 0 else boot.low > 0
    if side and all(m * direction > 0 for m in boot.cluster_means):
        return "replicated"
    return "contradicted" if other else "not replicated"


def holdout_table(checks: list[dict], tables: dict[str, pd.DataFrame]) -> list[str]:
    lines = ["| id | reading | compared (metric) | on | paper | expected when written "
             "| measured (95% cluster bootstrap) | trunks with the paper's sign | outcome |",
             "|---|---|---|---|---|---|---|---|---|"]
    for entry in checks:
        check = Claim.from_entry(entry)
        direction = DIRECTIONS[check.direction]
        if direction == 0:
            raise ValueError(f"holdout check {check.id}: direction must be up or down")
        boot = cluster_bootstrap(differences(check, tables), "value")
        measured = (f"{fmt_effect(boot.mean)} [{fmt_effect(boot.low)}, {fmt_effect(boot.high)}], "
                    f"{boot.n} states" if boot.n else "-")
        agree = sum(1 for m in boot.cluster_means if m * direction > 0)
        lines.append(f"| {check.id} | {check.claim} | {check.compared} ({check.metric}) | "
                     f"`{check.where}` | {check.paper} | {check.expect} | {measured} | "
                     f"{agree} of {len(boot.cluster_means)} | {outcome(boot, direction)} |")
    return lines
