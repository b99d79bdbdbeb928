"""The t tail, p-values, Holm's correction and intervals of zero width, on hand-worked numbers."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.claims.rules import Claim, across_levels, in_range, threshold
from analysis.core.multiplicity import holm, with_holm
from analysis.core.stats import fmt_ci, incomplete_beta, mean_ci, score_p, t_sf, two_sided_p, wilson


@pytest.mark.parametrize("t", [-2.0, 0.0, 0.3, 1.0, 5.0])
def test_t_tail_matches_the_closed_forms_of_one_and_two_degrees_of_freedom(t):
    # df 1 is the Cauchy: P(T > t) = 1/2 - atan(t)/pi; df 2: 1/2 - t / (2 sqrt(2 + t^2))
    assert t_sf(t, 1) == pytest.approx(0.5 - math.atan(t) / math.pi, abs=1e-12)
    assert t_sf(t, 2) == pytest.approx(0.5 - t / (2 * math.sqrt(2 + t * t)), abs=1e-12)


@pytest.mark.parametrize("df,t975", [(1, 12.706), (2, 4.303), (4, 2.776), (30, 2.042)])
def test_the_t_tables_quantiles_have_two_sided_p_of_five_percent(df, t975):
    assert 2 * t_sf(t975, df) == pytest.approx(0.05, abs=2e-4)  # the table has 3 decimals


def test_incomplete_beta_of_integer_parameters_is_a_binomial_tail():
    # I_x(a, b) for integers = P(Binomial(a + b - 1, x) >= a): a=2, b=3, x=0.4 ->
    # C(4,2) .4^2 .6^2 + C(4,3) .4^3 .6 + .4^4 = .3456 + .1536 + .0256
    assert incomplete_beta(2, 3, 0.4) == pytest.approx(0.5248, abs=1e-12)
    # past the continued fraction's switch point: 1 - P(0 of 4) - P(1 of 4) at x = 0.9
    assert incomplete_beta(2, 3, 0.9) == pytest.approx(1 - 0.1 ** 4 - 4 * 0.9 * 0.1 ** 3,
                                                       abs=1e-12)


def test_two_sided_p_of_a_one_sample_t_test():
    # 1, 2, 3 against 0: mean 2, sd 1, se 1/sqrt(3), t = 2 sqrt(3) on 2 df
    t = 2 * math.sqrt(3)
    assert two_sided_p([1, 2, 3]) == pytest.approx(2 * (0.5 - t / (2 * math.sqrt(2 + t * t))))
    assert math.isnan(two_sided_p([1.0]))  # one seed: no test
    assert math.isnan(two_sided_p([0.3, 0.3, 0.3]))  # no spread: no test


def test_score_p_is_below_five_percent_exactly_outside_the_wilson_interval():
    k, n = 30, 48
    _, low, high = wilson(k, n)
    assert score_p(k, n, high + 1e-6) < 0.05 < score_p(k, n, high - 1e-6)
    assert score_p(k, n, low - 1e-6) < 0.05 < score_p(k, n, low + 1e-6)


def test_holm_adjusts_by_rank_and_keeps_the_order():
    # sorted 0.01, 0.02, 0.04 of m = 3 (NaN is no test): 3 x 0.01, max(0.03, 2 x 0.02),
    # max(0.04, 1 x 0.04)
    got = holm([0.04, math.nan, 0.01, 0.02])
    assert got[0] == pytest.approx(0.04) and math.isnan(got[1])
    assert got[2:] == pytest.approx([0.03, 0.04])
    # monotone: a larger p never gets a smaller adjusted p (0.011 x 3 > 0.03 x 2)
    assert holm([0.011, 0.03, 0.5]) == pytest.approx([0.033, 0.06, 0.5])


def test_with_holm_keeps_a_settled_verdict_only_below_five_percent():
    claims = pd.DataFrame({"verdict": ["held", "not held", "not settled", "held", "no data"],
                           "p": [0.001, 0.02, 0.3, math.nan, math.nan]})
    out = with_holm(claims)
    assert (out["tests"] == 3).all()  # the rows with a test
    # 0.001 x 3 = 0.003 survives; 0.02 x 2 = 0.04 survives; 0.3 stays not settled
    assert out["holm_p"].iloc[:3].tolist() == pytest.approx([0.003, 0.04, 0.3])
    # the untested held row is a count (no estimate to correct): it keeps its verdict
    assert out["holm_verdict"].tolist() == ["held", "not held", "not settled", "held", "no data"]
    worse = with_holm(claims.assign(p=[0.02, 0.03, 0.3, math.nan, math.nan]))
    # 0.02 x 3 = 0.06: the first step fails, and Holm stops there
    assert worse["holm_verdict"].tolist()[:2] == ["not settled", "not settled"]


def test_an_interval_of_zero_width_is_printed_as_none_and_never_settles():
    values = pd.Series([0.758, 0.758, 0.758])
    m, low, high, n = mean_ci(values)
    assert low == high == m
    assert fmt_ci(m, low, high, n) == "0.758 (n=3; every seed equal: no interval)"
    c = threshold(Claim("x", "p", "c"), values, 0.5)
    assert c.verdict == "not settled" and "every seed equal" in c.note and math.isnan(c.p)
    # a narrow interval is printed to two significant digits, not rounded to ± 0.000
    narrow = mean_ci([0.0010, 0.0012, 0.0014])  # sd 0.0002: ± 4.303 * 0.0002 / sqrt(3)
    assert fmt_ci(*narrow) == f"0.001 ± {4.303 * 0.0002 / math.sqrt(3):.2g} (n=3)"


def test_a_range_claims_p_tests_both_ends_inside_and_the_nearer_end_outside():
    # 0.44, 0.45, 0.46: mean 0.45, se 0.01/sqrt(3); inside [0.43, 0.46] the nearer end is
    # 0.46, 0.01 away: p = 2 P(T > 0.01 / se) on 2 df
    se = 0.01 / math.sqrt(3)
    c = in_range(Claim("x", "p", "c"), pd.Series([0.44, 0.45, 0.46]), 0.43, 0.46)
    assert c.leans == "held" and c.p == pytest.approx(2 * t_sf(0.01 / se, 2))
    c = in_range(Claim("x", "p", "c"), pd.Series([0.44, 0.45, 0.46]), 0.30, 0.40)
    assert c.leans == "not held" and c.p == pytest.approx(2 * t_sf(0.05 / se, 2))


def test_a_row_over_levels_takes_the_largest_p_of_the_levels_that_decide():
    def level(p: float, leans: str, verdict: str = "held") -> Claim:
        return Claim("x", "p", "c", verdict=verdict, p=p, leans=leans)

    row = across_levels(Claim("x", "p", "c"), {2: level(0.01, "held"), 4: level(0.03, "held"),
                                               8: level(0.9, "not held", "not settled")})
    assert row.p == pytest.approx(0.03) and row.leans == "held"  # 8x does not decide
    mixed = across_levels(Claim("x", "p", "c"), {2: level(0.01, "held"),
                                                 4: level(0.01, "not held", "not held")})
    assert mixed.verdict == "not settled" and mixed.p == 1.0  # cannot be settled
