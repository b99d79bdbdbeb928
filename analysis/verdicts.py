"""Claim rows and their verdicts: `held` / `not held` only when 95% intervals settle it.

Shared by the paper-claims table (analysis/report.py) and the random-reward rows
(analysis/random_reward.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from analysis.stats import fmt_ci, mean_ci, wilson

VERDICTS = ("held", "not held", "not settled", "no data")


@dataclass
class Claim:
    claim: str
    paper: str
    criterion: str
    measured: str = "—"
    experiments: str = ""  # the experiments whose runs the numbers come from
    value: float = math.nan  # the main measured number, for tests and CSV readers
    verdict: str = "no data"  # held / not held only when the 95% interval settles it
    note: str = ""


def ci(values: pd.Series) -> tuple[float, float, float, int, str]:
    m, lo, hi, n = mean_ci(values)
    return m, lo, hi, n, fmt_ci(m, lo, hi, n)


def no_interval(c: Claim, *lows: float) -> bool:
    if any(math.isnan(x) for x in lows):
        c.verdict, c.note = "not settled", "one seed: no interval"
        return True
    return False


def threshold(c: Claim, values: pd.Series, above: float) -> Claim:
    """Held when the whole 95% interval lies above `above`, not held when below it."""
    return _one_side(c, values, above, want_above=True)


def _one_side(c: Claim, values: pd.Series, limit: float, want_above: bool) -> Claim:
    m, low, high, n, text = ci(values)
    if not n:
        return c
    c.measured, c.value = text, m
    if no_interval(c, low):
        return c
    if (low > limit) if want_above else (high < limit):
        c.verdict = "held"
    elif (high < limit) if want_above else (low > limit):
        c.verdict = "not held"
    else:
        c.verdict = "not settled"
        c.note = "95% interval includes the threshold" if want_above else f"95% interval includes {limit:g}"
    return c


def in_range(c: Claim, values: pd.Series, lo: float, hi: float) -> Claim:
    """Held when the whole 95% interval lies in [lo, hi], not held when it misses it."""
    m, low, high, n, text = ci(values)
    if not n:
        return c
    c.measured, c.value = text, m
    if no_interval(c, low):
        return c
    if lo <= low and high <= hi:
        c.verdict = "held"
    elif high < lo or low > hi:
        c.verdict = "not held"
    else:
        inside = "inside" if lo <= m <= hi else "outside"
        c.verdict = "not settled"
        c.note = f"mean {inside} the range; its 95% interval reaches {'out of' if inside == 'inside' else 'into'} it"
    return c


def greater(c: Claim, a: pd.Series, b: pd.Series, names: tuple[str, str]) -> Claim:
    """Held when a's 95% interval lies wholly above b's, not held when wholly below."""
    ma, la, ha, na, ta = ci(a)
    mb, lb, hb, nb, tb = ci(b)
    if not (na and nb):
        return c
    c.measured = f"{names[0]} {ta} vs {names[1]} {tb}"
    c.value = ma - mb
    if no_interval(c, la, lb):
        return c
    if la > hb:
        c.verdict = "held"
    elif ha < lb:
        c.verdict = "not held"
    else:
        c.verdict = "not settled"
        c.note = f"95% intervals overlap (means differ by {c.value:+.4f})"
    return c


def below(c: Claim, values: pd.Series, limit: float) -> Claim:
    """Held when the whole 95% interval lies below `limit`, not held when above it."""
    return _one_side(c, values, limit, want_above=False)


def share_above(c: Claim, k: int, n: int, limit: float) -> Claim:
    """k of n events: held when the share's 95% Wilson interval lies above `limit`, not
    held when below it."""
    if not n:
        return c
    share, low, high = wilson(k, n)
    c.measured = f"{share:.3f} [{low:.3f}, {high:.3f}] ({k} of {n})"
    c.value = share
    if low > limit:
        c.verdict = "held"
    elif high < limit:
        c.verdict = "not held"
    else:
        c.verdict, c.note = "not settled", f"95% Wilson interval includes {limit:g}"
    return c
