"""The statistical helpers on hand-computed numbers: paired t-interval, claim direction,
the per-level rule, and the gradient-clipping share."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.claims.rules import Claim, across_levels, directed, no_change
from analysis.core.grad_clip import clipped_flags, confound_note
from analysis.core.paired import DOWN, UP, direction_verdict, fmt_paired, paired_difference

T1, T2 = 12.706, 4.303  # t(0.975, df=1) and t(0.975, df=2), from any Student-t table


def test_paired_difference_by_hand():
    # seeds 0, 1, 2: a - b = -0.05, -0.03, -0.10 (all three worse)
    a = pd.Series([0.30, 0.35, 0.25], index=[0, 1, 2])
    b = pd.Series([0.35, 0.38, 0.35], index=[0, 1, 2])
    d = paired_difference(a, b)
    # mean -0.06; deviations 0.01, 0.03, -0.04: sum of squares 0.0026, sd = sqrt(0.0013)
    half = T2 * math.sqrt(0.0013) / math.sqrt(3)  # 0.0896
    assert d.mean == pytest.approx(-0.06) and d.n == 3
    assert (d.low, d.high) == pytest.approx((-0.06 - half, -0.06 + half))
    assert (d.above, d.below) == (0, 3)
    assert fmt_paired(d, UP) == "-0.060 ± 0.090 (n=3; 0 of 3 seeds > 0)"
    assert fmt_paired(d, DOWN) == "-0.060 ± 0.090 (n=3; 3 of 3 seeds < 0)"


def test_paired_difference_matches_seeds_not_positions():
    # b lists its seeds in another order and lacks seed 2: pairs are (0, 0) and (1, 1)
    a = pd.Series([1.0, 2.0, 9.0], index=[0, 1, 2])
    b = pd.Series([1.5, 0.5], index=[1, 0])  # seed 1: 1.5, seed 0: 0.5
    d = paired_difference(a, b)
    # differences 0.5, 0.5: mean 0.5, sd 0 -> interval [0.5, 0.5], df = 1
    assert (d.n, d.mean, d.low, d.high) == (2, 0.5, 0.5, 0.5)
    one = paired_difference(a, pd.Series([0.0], index=[2]))
    assert one.n == 1 and one.mean == 9.0 and math.isnan(one.low)
    assert fmt_paired(one, UP) == "+9.000 (n=1; 1 of 1 seeds > 0)"
    # two seeds: differences 1 and 3 -> mean 2, sd sqrt(2), half 12.706 * sqrt(2) / sqrt(2)
    two = paired_difference(pd.Series([1.0, 3.0]), pd.Series([0.0, 0.0]))
    assert (two.low, two.high) == pytest.approx((2 - T1, 2 + T1))


@pytest.mark.parametrize(
    ("low", "high", "direction", "ref", "verdict"),
    [
        (0.1, 0.3, UP, 0.0, "held"),  # wholly above, as stated
        (-0.3, -0.1, UP, 0.0, "not held"),  # wholly on the other side
        (-0.1, 0.3, UP, 0.0, "not settled"),  # holds the reference
        (-0.3, -0.1, DOWN, 0.0, "held"),
        (0.1, 0.3, DOWN, 0.0, "not held"),
        (0.52, 0.60, UP, 0.5, "held"),  # against another reference
        (0.40, 0.50, UP, 0.5, "not settled"),  # touching it is not excluding it
        (math.nan, math.nan, UP, 0.0, "not settled"),  # no interval
    ],
)
def test_direction_verdict(low, high, direction, ref, verdict):
    assert direction_verdict(low, high, direction, ref) == verdict


def test_a_row_tests_the_direction_it_states():
    rising = pd.Series([0.06, 0.07, 0.08])  # +0.07 ± 0.0248: wholly above 0
    assert directed(Claim("x", "", ""), rising, 0.0, UP).verdict == "held"
    assert directed(Claim("x", "", ""), rising, 0.0, DOWN).verdict == "not held"
    flat = pd.Series([-0.01, 0.0, 0.01])
    assert no_change(Claim("x", "", ""), flat).verdict == "not settled"
    assert no_change(Claim("x", "", ""), rising).verdict == "not held"


def _part(verdict: str, value: float = 0.0, note: str = "") -> Claim:
    return Claim("c", "", "", measured=f"m{value:g}", basis=f"b{value:g}", value=value,
                 verdict=verdict, note=note)


def test_across_levels_lets_only_the_papers_levels_decide():
    c = Claim("c", "p", "crit")
    out = across_levels(c, {2: _part("held", 2), 4: _part("held", 4), 8: _part("not held", 8)})
    assert out.verdict == "held" and out.value == 4  # the highest deciding level
    assert out.measured == "2x: m2; 4x: m4; 8x: m8"
    assert out.note == ("2x held, 4x held, 8x not held; 8x not run in the paper: shown, "
                        "not deciding")
    mixed = across_levels(c, {2: _part("not settled", note="95% interval includes 0.5"),
                              4: _part("held", note="confound: x")})
    assert mixed.verdict == "not settled"
    assert mixed.note == "2x not settled (95% interval includes 0.5), 4x held; 4x confound: x"
    assert across_levels(c, {2: _part("not held"), 4: _part("not held")}).verdict == "not held"
    assert across_levels(c, {8: _part("held")}).verdict == "not settled"  # 8x alone
    assert across_levels(c, {2: _part("no data")}).verdict == "no data"


def test_gradient_clipping_share_from_the_norm_or_the_flag():
    updates = pd.DataFrame({
        "run_id": ["a", "a", "a", "a", "b", "b"],
        "grad_norm": [0.5, 1.5, 1.0, 2.0, 3.0, 3.0],
        "skipped": [False, False, False, True, False, False],
        "grad_clipped": [None, None, None, None, True, False],  # logged by newer runs only
    })
    flags = clipped_flags(updates, {"a": 1.0, "b": 1.0})
    # a: 0.5 no, 1.5 yes, 1.0 no (clipped only above the limit), skipped: unknown
    # b: the logged flag wins over the norm
    assert flags.tolist()[:3] == [0.0, 1.0, 0.0] and math.isnan(flags.iat[3])
    assert flags.tolist()[4:] == [1.0, 0.0]
    assert math.isnan(clipped_flags(updates, {}).iat[0])  # no grad_clip: unknown
    assert confound_note(pd.Series([0.2, 0.2]), pd.Series([0.16]), ("a", "b")) == ""
    assert confound_note(pd.Series([0.23]), pd.Series([0.0]), ("4x", "1x")) == (
        "confound: gradient-norm clipping binds on 23% (4x) vs 0% (1x) of updates")
