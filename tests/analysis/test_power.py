"""Seed counts and their uncertainty (analysis/core/power.py), pilots and the seeds-needed
column of a claims table (analysis/claims/verdicts.py, distance.py), against values from
printed tables and closed forms."""

from __future__ import annotations

import math
from statistics import NormalDist

import pytest

from analysis.claims import verdicts
from analysis.claims.distance import NO_PAPER_VALUE, NONE
from analysis.claims.rules import Claim
from analysis.core.multiplicity import holm_alpha
from analysis.core.power import (
    chi2_quantile,
    lower_gamma,
    sd_interval,
    seeds_needed,
    t_quantile,
)

# Student t quantiles from a printed table (df: t(0.975), t(0.8)).
T_TABLE = {1: (12.706, 1.376), 4: (2.776, 0.941), 8: (2.306, 0.889), 9: (2.262, 0.883),
           32: (2.037, 0.853), 33: (2.035, 0.853)}


@pytest.mark.parametrize("df", sorted(T_TABLE))
def test_t_quantile_matches_the_printed_table(df):
    upper, power = T_TABLE[df]
    assert t_quantile(0.975, df) == pytest.approx(upper, abs=6e-4)
    assert t_quantile(0.8, df) == pytest.approx(power, abs=6e-4)
    assert t_quantile(0.025, df) == pytest.approx(-upper, abs=6e-4)  # symmetric
    assert t_quantile(0.5, df) == 0.0


def test_lower_gamma_matches_closed_forms():
    for x in (0.01, 0.5, 1.0, 3.0, 12.0):
        assert lower_gamma(1.0, x) == pytest.approx(1 - math.exp(-x), rel=1e-12)
        assert lower_gamma(0.5, x) == pytest.approx(math.erf(math.sqrt(x)), rel=1e-12)


def test_chi2_quantile_two_df_is_closed_form_and_seven_df_the_table():
    # with 2 degrees of freedom the chi-square CDF is 1 - exp(-x/2)
    for q in (0.025, 0.5, 0.975):
        assert chi2_quantile(q, 2) == pytest.approx(-2 * math.log(1 - q), rel=1e-9)
    assert chi2_quantile(0.025, 7) == pytest.approx(1.690, abs=1e-3)
    assert chi2_quantile(0.975, 7) == pytest.approx(16.013, abs=1e-3)


def test_sd_interval_at_three_seeds_spans_half_to_six_times():
    low, high = sd_interval(1.0, 3)
    assert low == pytest.approx(math.sqrt(2 / (-2 * math.log(0.025))), rel=1e-9)  # 0.521
    assert high == pytest.approx(math.sqrt(2 / (-2 * math.log(0.975))), rel=1e-9)  # 6.28
    low8, high8 = sd_interval(2.0, 8)
    assert (low8, high8) == pytest.approx((2 * math.sqrt(7 / 16.013), 2 * math.sqrt(7 / 1.690)),
                                          rel=1e-3)
    assert all(math.isnan(x) for x in sd_interval(1.0, 1))


def _enough(n: int, ratio: float) -> bool:
    upper, power = T_TABLE[n - 1]
    return upper + power <= math.sqrt(n) * ratio


def test_seeds_needed_for_one_sd_is_ten_by_hand():
    assert _enough(10, 1.0) and not _enough(9, 1.0)  # 3.145 <= 3.162; 3.195 > 3.0
    assert seeds_needed(1.0, 1.0, 0.05) == 10
    # the normal approximation, (1.960 + 0.842)^2 = 7.85, would say 8: t's tails add two
    z = NormalDist().inv_cdf
    assert math.ceil((z(0.975) + z(0.8)) ** 2) == 8
    assert seeds_needed(-1.0, 1.0, 0.05) == 10  # the effect's sign does not matter


def test_seeds_needed_for_half_an_sd_is_34_by_hand():
    assert _enough(34, 0.5) and not _enough(33, 0.5)  # 2.888 <= 2.915; 2.890 > 2.872
    assert seeds_needed(0.5, 1.0, 0.05) == 34


def test_seeds_needed_depends_on_the_ratio_and_grows_as_alpha_shrinks():
    assert seeds_needed(0.078, 0.05, 0.01) == seeds_needed(1.0, 0.05 / 0.078, 0.01)
    assert seeds_needed(1.0, 1.0, 0.05 / 13) > seeds_needed(1.0, 1.0, 0.05)
    assert seeds_needed(10.0, 1.0, 0.05) == 2  # never fewer than two seeds
    with pytest.raises(ValueError, match="sd > 0"):
        seeds_needed(1.0, 0.0, 0.05)


def test_holm_alpha_is_each_step_level():
    assert holm_alpha([0.01, 0.04, 0.03, math.nan])[:3] == pytest.approx([0.05 / 3, 0.05, 0.025])
    assert math.isnan(holm_alpha([0.01, 0.04, 0.03, math.nan])[3])


def _paired(verdict: str, p: float, seeds: int, sd: float, effect: float = math.nan) -> Claim:
    return Claim("c", "paper", "criterion", verdict=verdict, p=p, seeds=seeds, sd=sd,
                 effect=effect)


def test_table_marks_pilots_and_counts_only_the_others_as_tests():
    rows = [_paired("held", 0.001, 8, 0.02), _paired("not settled", 0.30, 8, 0.05, 0.078),
            _paired("held", 0.002, 3, 0.02), _paired("not settled", 0.4, 8, 0.05),
            Claim("one-sided", "p", "c", verdict="not settled", p=0.5, seeds=8)]
    t = verdicts.table(rows)
    assert t["verdict"].tolist() == ["held", "not settled", "pilot", "not settled", "not settled"]
    assert t["holm_verdict"].iat[2] == "pilot" and math.isnan(t["holm_p"].iat[2])
    assert int(t["tests"].iat[0]) == 4  # the pilot is not among them
    # row 1 has the 2nd smallest p of 4 tests: Holm's level 0.05 / 3
    assert t["holm_alpha"].iat[1] == pytest.approx(0.05 / 3)
    n = seeds_needed(0.078, 0.05, 0.05 / 3)
    low, high = sd_interval(0.05, 8)
    ends = seeds_needed(0.078, low, 0.05 / 3), seeds_needed(0.078, high, 0.05 / 3)
    assert t["seeds_needed"].iat[1] == f"{n} ({ends[0]}-{ends[1]})"
    assert ends[0] < n < ends[1]
    assert t["seeds_needed"].iat[0] == NONE  # held
    assert t["seeds_needed"].iat[3] == NO_PAPER_VALUE
    assert t["seeds_needed"].iat[4] == NONE  # not a paired comparison


def test_a_pilot_is_sized_at_the_bonferroni_level_of_tests_and_pilots():
    rows = [_paired("not settled", 0.3, 8, 0.05), _paired("not settled", 0.2, 3, 0.05, 0.078)]
    t = verdicts.table(rows)
    n = seeds_needed(0.078, 0.05, 0.05 / 2)  # one test, one pilot
    assert t["seeds_needed"].iat[1].startswith(f"{n} (")


def test_a_row_by_construction_or_without_seeds_is_no_pilot():
    built = _paired("held", math.nan, 3, 0.02)
    built.by_construction = "why"
    count = Claim("reach", "p", "c", verdict="held")  # an exact count: no seeds
    one = Claim("one seed", "p", "c", verdict="not settled", seeds=1)
    t = verdicts.table([built, count, one])
    assert t["verdict"].tolist() == ["held", "held", "pilot"]
