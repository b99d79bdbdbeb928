"""How far a row is from settled: the seeds it would need (docs/statistics.md).

A paired comparison that Holm's correction leaves `not settled` gets the number of seeds a
two-sided paired t-test would need to detect the paper's effect (the row's declared
`effect`, a difference) at the row's measured paired sd, with 80% power, at the level of
the row's Holm step (analysis/core/power.py). Beside it, the same count at the two ends of
the sd's chi-square 95% interval: the sd is measured on the row's own seeds, so the count
is an order of magnitude. A pilot (too few seeds for a verdict) is not among Holm's tests;
its count is at the Bonferroni level ALPHA / (m + pilots), the strictest step Holm would
give it were every pilot a test. Every other row: `—`; a paired row whose claim declares
no paper value: `no paper value`.
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.core.multiplicity import ALPHA, PILOT
from analysis.core.power import MAX_SEEDS, POWER, sd_interval, seeds_needed

NONE, NO_PAPER_VALUE = "—", "no paper value"
COLUMN = "seeds_needed"  # claims.csv's column; the reports show it as HEADING
HEADING = f"seeds needed ({POWER:.0%} power)"


def fmt_seeds(n: int) -> str:
    return f"> {MAX_SEEDS:,}" if n > MAX_SEEDS else str(n)


def seeds_text(effect: float, sd: float, seeds: int, alpha: float) -> str:
    """'23 (9-190)': the count at the measured sd, then at the ends of the sd's 95% interval
    over the row's seeds (n grows with sd squared)."""
    if not sd > 0 or math.isnan(alpha):
        return NONE
    if math.isnan(effect):
        return NO_PAPER_VALUE
    n = seeds_needed(effect, sd, alpha)
    low, high = sd_interval(sd, seeds)
    if math.isnan(low):
        return fmt_seeds(n)
    ends = (seeds_needed(effect, low, alpha), seeds_needed(effect, high, alpha))
    return f"{fmt_seeds(n)} ({fmt_seeds(ends[0])}-{fmt_seeds(ends[1])})"


def seeds_column(table: pd.DataFrame) -> list[str]:
    """One table's seeds-needed cells (columns holm_verdict, holm_alpha, sd, effect, seeds,
    tests), in its order."""
    pilots = int((table["holm_verdict"] == PILOT).sum())
    tests = int(table["tests"].iat[0]) if len(table) else 0
    bonferroni = ALPHA / (tests + pilots) if tests + pilots else math.nan
    out = []
    for r in table.itertuples(index=False):
        if r.holm_verdict == "not settled":
            out.append(seeds_text(r.effect, r.sd, r.seeds, r.holm_alpha))
        elif r.holm_verdict == PILOT and r.seeds > 1:
            out.append(seeds_text(r.effect, r.sd, r.seeds, bonferroni))
        else:
            out.append(NONE)
    return out
