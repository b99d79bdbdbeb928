"""Mean and 95% interval over seeds (Student t), used by every figure and the report; the
Wilson interval of a share; the Student t distribution's tail, for the p-values that
Holm's correction over a table's claims needs.

Computed rather than bootstrapped: it is deterministic (reruns give identical figures) and
costs nothing, while seaborn's bootstrap is random and slow on ~40 runs x 60 steps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

# Two-sided 95% Student t quantiles t_{0.975, df}; scipy is not a dependency.
# fmt: off
_T975 = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
]
# fmt: on
Z975 = 1.959964  # two-sided 95% normal quantile


def t975(df: int) -> float:
    if df < 1:
        return math.nan
    if df <= len(_T975):
        return _T975[df - 1]
    return 1.960 + 2.4 / df  # within 0.005 of the exact value for df > 30


def all_equal(x: np.ndarray) -> bool:
    """Values equal up to float rounding (0.1 + 0.2 - 0.2 is not 0.1 to the bit): their
    spread is no spread."""
    return bool(np.ptp(x) <= 1e-12 * max(1.0, float(np.abs(x).max())))


def mean_ci(values: Sequence[float] | np.ndarray | pd.Series) -> tuple[float, float, float, int]:
    """(mean, low, high, n) of the non-null values; low/high are NaN when n < 2."""
    x = np.asarray(pd.Series(values, dtype="float64").dropna())
    n = len(x)
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    m = float(x.mean())
    if n < 2:
        return m, math.nan, math.nan, n
    # equal values: exactly zero width (their float mean need not equal them to the bit)
    half = 0.0 if all_equal(x) else t975(n - 1) * float(x.std(ddof=1)) / math.sqrt(n)
    return m, m - half, m + half, n


def agg_ci(df: pd.DataFrame, by: list[str], value: str) -> pd.DataFrame:
    """Per group of `by`: mean, ci_low, ci_high, n of `value` (one row per seed/run)."""
    g = df.dropna(subset=[value]).groupby(by, sort=True, observed=True)[value]
    out = g.agg(mean="mean", std="std", n="count").reset_index()
    t = out["n"].map(lambda n: t975(int(n) - 1))
    half = t * out["std"] / np.sqrt(out["n"])
    out["ci_low"] = out["mean"] - half
    out["ci_high"] = out["mean"] + half
    return out.drop(columns="std")


def fmt_half(half: float, digits: int = 3) -> str:
    """A half-width as printed: at `digits` decimals, or to two significant digits where
    those decimals would round it to 0 (a narrow interval is not a missing one)."""
    text = f"{half:.{digits}f}"
    return f"{half:.2g}" if half > 0 and float(text) == 0 else text


# What a mean over seeds that all gave the same number says in place of an interval: a
# t-interval of zero width is no interval (every seed had the same count, not certainty).
NO_SPREAD = "every seed equal: no interval"


def no_spread(low: float, high: float, n: int) -> bool:
    """Seeds (two or more) whose values are all equal: the t-interval has zero width."""
    return n >= 2 and not math.isnan(low) and low == high


def fmt_ci(mean: float, low: float, high: float, n: int, digits: int = 3) -> str:
    """'0.512 ± 0.034 (n=3)'; the ± is dropped when one seed gives no interval, and when
    every seed gave the same value (a zero-width interval is not an interval)."""
    if n == 0 or math.isnan(mean):
        return "—"
    if math.isnan(low):
        return f"{mean:.{digits}f} (n={n})"
    if no_spread(low, high, n):
        return f"{mean:.{digits}f} (n={n}; {NO_SPREAD})"
    return f"{mean:.{digits}f} ± {fmt_half((high - low) / 2, digits)} (n={n})"


def wilson(k: int, n: int, z: float = Z975) -> tuple[float, float, float]:
    """(share, low, high): k of n with the Wilson score 95% interval; NaNs when n = 0."""
    if n == 0:
        return math.nan, math.nan, math.nan
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return p, max(0.0, centre - half), min(1.0, centre + half)


def fmt_wilson(k: int, n: int, digits: int = 3) -> str:
    """'0.077 [0.040, 0.145] (8 of 104; Wilson, pooled updates)': a share of pooled records
    with its Wilson score interval, labelled so it is not read as a t-interval over seeds."""
    if n == 0:
        return "— (0 records)"
    p, low, high = wilson(k, n)
    return f"{p:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}] ({k} of {n}; Wilson, pooled updates)"


# ------------------------------------------------------------------ Student t tail, p-values


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz;
    Numerical Recipes, betacf); converges fast for x < (a + 1) / (a + b + 2)."""
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function, for a, b > 0 and x in [0, 1]."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` degrees of freedom."""
    if math.isnan(t) or df <= 0:
        return math.nan
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))  # P(T > |t|)
    return tail if t >= 0 else 1.0 - tail


def mean_se(values: Sequence[float] | np.ndarray | pd.Series) -> tuple[float, float, int]:
    """(mean, standard error, n) of the non-null values; the standard error is NaN for fewer
    than two values and 0 when they are all equal."""
    x = np.asarray(pd.Series(values, dtype="float64").dropna())
    n = len(x)
    if n == 0:
        return math.nan, math.nan, 0
    if n < 2:
        return float(x.mean()), math.nan, n
    se = 0.0 if all_equal(x) else float(x.std(ddof=1)) / math.sqrt(n)
    return float(x.mean()), se, n


def two_sided_p(values: Sequence[float] | np.ndarray | pd.Series, ref: float = 0.0) -> float:
    """The two-sided p-value of the one-sample t-test of the mean against `ref`; NaN for
    fewer than two values or none of spread (no standard error to test with). It is below
    0.05 exactly when the 95% t-interval excludes `ref`."""
    m, se, n = mean_se(values)
    if not se > 0:  # NaN (one value) or 0 (no spread)
        return math.nan
    return min(1.0, 2.0 * t_sf(abs(m - ref) / se, n - 1))


def score_p(k: int, n: int, p0: float) -> float:
    """Two-sided p of the score test of a share k/n against p0: the test the Wilson interval
    inverts (p < 0.05 exactly when p0 lies outside the 95% Wilson interval); NaN when n = 0."""
    if n == 0:
        return math.nan
    z = (k / n - p0) / math.sqrt(p0 * (1 - p0) / n)
    return math.erfc(abs(z) / math.sqrt(2))
