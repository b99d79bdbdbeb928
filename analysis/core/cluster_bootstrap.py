"""A two-stage cluster bootstrap of a mean, for the microscope's paired differences.

States of one trunk are not independent: they share the trunk's trajectory, and the updates
of one rollout share its data. A t-test over states would treat hundreds of correlated
numbers as independent and claim far too much. So the resampling follows the design:
draw trunks with replacement, then within each drawn trunk draw its rollouts with
replacement, and keep every update of a drawn rollout; the statistic is the mean over the
rows drawn. Its spread carries the trunk-to-trunk and the rollout-to-rollout variation.

With few trunks (3-4) the first stage is coarse: the interval cannot be wider than the
trunks' own spread allows, so every report gives the per-trunk means and how many trunks
agree in sign beside it (docs/statistics.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.core.power import seeds_needed, t_quantile
from analysis.core.stats import t_sf

REPS = 10_000
SEED = 20_261_206  # fixed: a rerun of the report gives the same intervals


@dataclass(frozen=True)
class Boot:
    mean: float
    low: float  # the (alpha/2, 1 - alpha/2) percentile interval
    high: float
    p: float  # two-sided: twice the smaller share of bootstrap means on either side of 0
    se: float  # the bootstrap means' standard deviation
    n: int  # rows (states)
    clusters: int  # trunks
    cluster_means: tuple[float, ...]


def cluster_bootstrap(rows: pd.DataFrame, value: str, cluster: str = "seed",
                      within: str = "rollout", alpha: float = 0.05, reps: int = REPS,
                      seed: int = SEED) -> Boot:
    """The bootstrap of the mean of `rows[value]` (NaN rows dropped), resampling `cluster`
    groups, then `within` groups inside each drawn cluster."""
    data = rows[[cluster, within, value]].dropna()
    if data.empty:
        return Boot(math.nan, math.nan, math.nan, math.nan, math.nan, 0, 0, ())
    groups = data.groupby([cluster, within])[value].agg(["sum", "count"])
    per_cluster = [(g["sum"].to_numpy(), g["count"].to_numpy())
                   for _, g in groups.groupby(level=0)]
    rng = np.random.default_rng(seed)
    k = len(per_cluster)
    picks = rng.integers(0, k, size=(reps, k))
    sums, counts = np.zeros(reps), np.zeros(reps)
    for c, (s, n) in enumerate(per_cluster):
        times = (picks == c).sum(axis=1)  # how often each replicate drew this cluster
        for r in np.flatnonzero(times):
            inner = rng.integers(0, len(s), size=(times[r], len(s)))
            sums[r] += s[inner].sum()
            counts[r] += n[inner].sum()
    means = sums / counts
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    p = min(1.0, 2 * min(float((means <= 0).mean()), float((means >= 0).mean())))
    cluster_means = tuple(float(s.sum() / n.sum()) for s, n in per_cluster)
    return Boot(float(data[value].mean()), float(low), float(high), p, float(means.std(ddof=1)),
                len(data), k, cluster_means)


def states_needed(boot: Boot, alpha: float, power: float = 0.8) -> float:
    """States (at this design's correlation) that would settle the measured mean at `alpha`
    (two-sided) with `power`: n (z_(1-alpha/2) + z_power)^2 se^2 / mean^2. An order of
    magnitude: the mean and se are themselves estimates."""
    from statistics import NormalDist

    if not (boot.mean and math.isfinite(boot.se)) or boot.se == 0:
        return math.nan
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    return boot.n * (z * boot.se / boot.mean) ** 2


@dataclass(frozen=True)
class TrunkT:
    low: float  # the 95% t-interval of the mean of the trunks' own means
    high: float
    p: float  # two-sided, t with trunks - 1 degrees of freedom
    sd: float  # the sd of the trunks' means


def trunk_t(boot: Boot) -> TrunkT:
    """The t-interval over the trunks' own means (trunks - 1 degrees of freedom): exact for
    normal trunk means whatever the correlation within a trunk, where the bootstrap's first
    stage, with 3-4 trunks, covers as little as 0.76-0.85 once trunks differ
    (experiments/microscope/bootstrap_coverage.py)."""
    g = len(boot.cluster_means)
    if g < 2:
        return TrunkT(math.nan, math.nan, math.nan, math.nan)
    means = np.asarray(boot.cluster_means)
    mean, sd = float(means.mean()), float(means.std(ddof=1))
    if sd == 0:
        return TrunkT(mean, mean, 0.0 if mean else 1.0, 0.0)
    half = t_quantile(0.975, g - 1) * sd / math.sqrt(g)
    return TrunkT(mean - half, mean + half, 2 * t_sf(abs(mean) / (sd / math.sqrt(g)), g - 1), sd)


def trunks_needed(boot: Boot, alpha: float, power: float = 0.8) -> float:
    """Trunks (each as many states as these) that a t-test over trunk means at `alpha` would
    need to settle the measured mean with `power`, from the trunks' measured sd: more states
    of the same trunks cannot shrink the trunk-to-trunk part. An order of magnitude."""
    spread = trunk_t(boot).sd
    if not (spread > 0 and boot.mean):
        return math.nan
    return float(seeds_needed(boot.mean, spread, alpha, power))
