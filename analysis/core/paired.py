"""Paired differences over seeds, and the verdict of a claim's stated direction.

Methods compared in one suite share their seeds (the seed fixes the problems, the initial
model and the rollout sampling), so seed s of method A and seed s of method B are a pair.
Comparing a - b seed by seed removes what the seed does to both; two unpaired intervals
set side by side keep it and hide, for example, that A lost on every seed. Every
comparison claim is judged on the paired difference (docs/statistics.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from analysis.core.stats import NO_SPREAD, fmt_half, mean_ci, no_spread, two_sided_p

# A claim's expected direction: the measured number (or difference) rises or falls.
UP, DOWN = 1, -1


@dataclass(frozen=True)
class Paired:
    """a - b over the seeds both have: mean, 95% t-interval, and the seeds on each side."""

    mean: float
    low: float
    high: float
    n: int
    above: int  # seeds with a - b > 0
    below: int  # seeds with a - b < 0
    p: float = math.nan  # two-sided paired t-test of a - b against 0 (NaN: no test)
    sd: float = math.nan  # sd of the per-seed differences (NaN for fewer than two)

    def seeds_in(self, direction: int) -> int:
        return self.above if direction == UP else self.below


def paired_difference(a: pd.Series, b: pd.Series) -> Paired:
    """a - b paired by index (the seed); seeds missing on either side are left out."""
    a, b = a.dropna(), b.dropna()
    common = a.index.intersection(b.index)
    d = (a.loc[common] - b.loc[common]).astype(float)
    m, lo, hi, n = mean_ci(d)
    sd = float(d.std(ddof=1)) if n > 1 else math.nan
    return Paired(m, lo, hi, n, int((d > 0).sum()), int((d < 0).sum()), two_sided_p(d), sd)


def direction_verdict(low: float, high: float, direction: int, ref: float = 0.0) -> str:
    """`held` when the 95% interval [low, high] excludes `ref` on the expected side,
    `not held` when it excludes it on the other side, `not settled` otherwise (also when
    there is no interval, or one of zero width: seeds that all gave one value)."""
    if math.isnan(low) or math.isnan(high) or low == high:  # no interval, or no spread
        return "not settled"
    if (low > ref) if direction == UP else (high < ref):
        return "held"
    if (high < ref) if direction == UP else (low > ref):
        return "not held"
    return "not settled"


def fmt_paired(p: Paired, direction: int, digits: int = 3) -> str:
    """'-0.061 ± 0.094 (n=3; 0 of 3 seeds > 0)': the seed count on the expected side."""
    if p.n == 0:
        return "—"
    side = "> 0" if direction == UP else "< 0"
    seeds = f"{p.seeds_in(direction)} of {p.n} seeds {side}"
    if math.isnan(p.low):
        return f"{p.mean:+.{digits}f} (n={p.n}; {seeds})"
    if no_spread(p.low, p.high, p.n):
        return f"{p.mean:+.{digits}f} (n={p.n}; {seeds}; {NO_SPREAD})"
    return f"{p.mean:+.{digits}f} ± {fmt_half((p.high - p.low) / 2, digits)} (n={p.n}; {seeds})"
