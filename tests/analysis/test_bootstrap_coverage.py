"""The coverage simulation behind the microscope's verdict rule (docs/statistics.md): its
vectorized bootstrap is the module's estimator, and at a strong trunk correlation it shows
what the docs say it shows (the t over trunk means covers near 0.95, the bootstrap less)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.core.cluster_bootstrap import cluster_bootstrap
from experiments.microscope.bootstrap_coverage import (
    ROLLOUTS,
    UPDATES,
    bootstrap_interval,
    coverage,
    simulate,
)


def test_the_vectorized_interval_is_the_modules_estimator():
    study = simulate(np.random.default_rng(1), 4, 0.05, 0.15, "normal")
    assert study.shape == (4, ROLLOUTS, UPDATES)
    rows = pd.DataFrame({"seed": np.repeat(np.arange(4), ROLLOUTS * UPDATES),
                         "rollout": np.tile(np.repeat(np.arange(ROLLOUTS), UPDATES), 4),
                         "value": study.ravel()})
    module = cluster_bootstrap(rows, "value", reps=4000)
    mine = bootstrap_interval(np.random.default_rng(2), study, 4000)
    width = module.high - module.low
    # the same distribution, two resamplings: the ends agree to a few percent of the width
    assert mine == pytest.approx((module.low, module.high), abs=0.05 * width)


def test_at_a_strong_trunk_correlation_only_the_t_over_trunks_keeps_its_coverage():
    c = coverage(4, 0.3, 0.15, "normal", studies=400, reps=1000, seed=7)
    assert 0.92 <= c["t over trunks"] <= 0.98
    assert c["bootstrap"] < 0.9
    # 4 trunks of one sign by chance: 2 / 2^4 = 1/8
    assert c["all trunks one sign"] == pytest.approx(0.125, abs=0.05)
