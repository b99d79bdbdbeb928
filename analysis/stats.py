"""Mean and 95% interval over seeds (Student t), used by every figure and the report; the
Wilson interval of a share.

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


def mean_ci(values: Sequence[float] | np.ndarray | pd.Series) -> tuple[float, float, float, int]:
    """(mean, low, high, n) of the non-null values; low/high are NaN when n < 2."""
    x = np.asarray(pd.Series(values, dtype="float64").dropna())
    n = len(x)
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    m = float(x.mean())
    if n < 2:
        return m, math.nan, math.nan, n
    half = t975(n - 1) * float(x.std(ddof=1)) / math.sqrt(n)
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


def fmt_ci(mean: float, low: float, high: float, n: int, digits: int = 3) -> str:
    """'0.512 ± 0.034 (n=3)'; the ± is dropped when one seed gives no interval."""
    if n == 0 or math.isnan(mean):
        return "—"
    if math.isnan(low):
        return f"{mean:.{digits}f} (n={n})"
    return f"{mean:.{digits}f} ± {(high - low) / 2:.{digits}f} (n={n})"


def wilson(k: int, n: int, z: float = Z975) -> tuple[float, float, float]:
    """(share, low, high): k of n with the Wilson score 95% interval; NaNs when n = 0."""
    if n == 0:
        return math.nan, math.nan, math.nan
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return p, max(0.0, centre - half), min(1.0, centre + half)
