"""How many seeds a paired comparison would need to detect the paper's effect, and how
uncertain that number is (docs/statistics.md, "How far from settled").

A paired t-test of the mean difference against 0, two-sided at level `alpha`, has power
1 - beta to detect a true difference `delta` when the per-seed differences have sd `sd`
and, approximately (the central-t form of the noncentral-t power),

    t(1 - alpha/2, n - 1) + t(1 - beta, n - 1) <= sqrt(n) |delta| / sd.

The smallest such n is the seed count. The sd is itself measured on a few seeds: the
chi-square 95% interval of a normal sample's sd (`sd_interval`) spans a factor of about
0.5-6 at 3 seeds and 0.7-2 at 8, and n scales with sd squared, so the count is an order of
magnitude, never a promise.

scipy is not a dependency: the t quantile inverts analysis/core/stats.py's t tail (the
regularized incomplete beta function) by bisection, and the chi-square quantile inverts the
regularized lower incomplete gamma function, computed here (Numerical Recipes' series and
continued fraction).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import NormalDist

from analysis.core.stats import t_sf

POWER = 0.8  # the power asked of a seed count
MAX_SEEDS = 1_000_000  # past this the count says "more than"


def _invert(decreasing: Callable[[float], float], target: float, low: float = 0.0) -> float:
    """The x > low where a decreasing function of x crosses `target` (bisection, to about 1e-12
    relative): the upper bracket doubles until it lies past the crossing."""
    high = max(1.0, 2.0 * low)
    while decreasing(high) > target:
        low, high = high, 2.0 * high
    for _ in range(200):
        mid = 0.5 * (low + high)
        if decreasing(mid) > target:
            low = mid
        else:
            high = mid
        if high - low <= 1e-12 * high:
            break
    return 0.5 * (low + high)


def t_quantile(q: float, df: float) -> float:
    """The q-quantile of Student's t with `df` degrees of freedom (0 < q < 1)."""
    if not 0.0 < q < 1.0 or df <= 0:
        return math.nan
    if q == 0.5:
        return 0.0
    upper = _invert(lambda t: t_sf(t, df), 1.0 - max(q, 1.0 - q))
    return upper if q > 0.5 else -upper


def lower_gamma(a: float, x: float) -> float:
    """P(a, x), the regularized lower incomplete gamma function (a > 0, x >= 0): its series
    below x = a + 1, one minus its continued fraction (modified Lentz) above."""
    if x <= 0.0:
        return 0.0
    log_front = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        for k in range(1, 1000):
            term *= x / (a + k)
            total += term
            if abs(term) < abs(total) * 1e-16:
                break
        return total * math.exp(log_front)
    tiny = 1e-300
    b = x + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 1000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = b + an / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        if abs(d * c - 1.0) < 1e-16:
            break
    return 1.0 - math.exp(log_front) * h


def chi2_quantile(q: float, df: float) -> float:
    """The q-quantile of the chi-square distribution with `df` degrees of freedom."""
    if not 0.0 < q < 1.0 or df <= 0:
        return math.nan
    return _invert(lambda x: 1.0 - lower_gamma(df / 2.0, x / 2.0), 1.0 - q)


def sd_interval(sd: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """The `level` interval of a normal sample's sd measured as `sd` on n values:
    sd * sqrt((n - 1) / chi2(1 - a/2, n - 1)) to sd * sqrt((n - 1) / chi2(a/2, n - 1))."""
    if n < 2 or math.isnan(sd):
        return math.nan, math.nan
    tail, df = (1.0 - level) / 2.0, n - 1
    return (sd * math.sqrt(df / chi2_quantile(1.0 - tail, df)),
            sd * math.sqrt(df / chi2_quantile(tail, df)))


def seeds_needed(delta: float, sd: float, alpha: float, power: float = POWER) -> int:
    """The smallest n >= 2 with t(1 - alpha/2, n-1) + t(power, n-1) <= sqrt(n) |delta| / sd:
    the seeds a two-sided paired t-test at `alpha` needs to detect a true mean difference
    `delta` with `power`, when the differences have sd `sd`. The left side falls and the
    right side rises with n, so the first n that passes is the answer; the normal
    approximation (z quantiles, smaller than t's) gives a lower bound to start from.
    MAX_SEEDS + 1 where even that many would not do."""
    if not (sd > 0 and delta != 0 and 0 < alpha < 1 and 0 < power < 1):
        raise ValueError(f"seeds_needed needs sd > 0, delta != 0, 0 < alpha, power < 1 "
                         f"(got delta={delta}, sd={sd}, alpha={alpha}, power={power})")
    ratio = abs(delta) / sd
    z = NormalDist().inv_cdf
    start = max(2, math.ceil(((z(1 - alpha / 2) + z(power)) / ratio) ** 2))
    if start > MAX_SEEDS:
        return MAX_SEEDS + 1

    def enough(n: int) -> bool:
        return t_quantile(1 - alpha / 2, n - 1) + t_quantile(power, n - 1) <= math.sqrt(n) * ratio

    n = start
    while not enough(n):
        if n > MAX_SEEDS:
            return MAX_SEEDS + 1
        n += 1
    return n
