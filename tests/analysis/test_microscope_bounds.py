"""bapo - ppo within each bounds pair bapo chose: analysis/reports/microscope_bounds.py.

The table is built by hand: bapo parks at (0.9, 3.0) on the states of rollout 0 and stays at
(0.6, 1.2) elsewhere, and its effect on each metric differs between the two, so each pair's
mean is known before the code runs."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest

from analysis.reports.microscope_bounds import bounds_effects_table, effects_by_bounds


def _branches(rollouts: int = 4) -> pd.DataFrame:
    rows = []
    for seed, rollout, update in itertools.product(range(3), range(rollouts), (0, 1, 2, 3)):
        base = 0.01 * seed + 0.001 * rollout  # the state's own level, shared by both arms
        parked = rollout == 0
        for arm in ("ppo", "bapo"):
            effect = (0.0 if arm == "ppo" else 0.002 if parked else -0.001)
            bounds = (0.8, 1.2) if arm == "ppo" else (0.9, 3.0) if parked else (0.6, 1.2)
            rows.append({"experiment": "e", "trunk": "ppo", "minibatch": 8, "seed": seed,
                         "rollout": rollout, "update": update, "arm": arm,
                         "d_entropy": base + effect, "positive_share": 0.4 + 5 * effect,
                         "d_logp_correct": -base + 10 * effect,
                         "c_low": bounds[0], "c_high": bounds[1]})
    return pd.DataFrame(rows)


def test_each_pair_reads_the_paired_difference_on_its_own_states():
    effects = effects_by_bounds(_branches(), "bapo", "ppo", "update >= 1").set_index(
        ["c_low", "c_high", "metric"])
    # rollout 0 of 4 parks: 3 trunks x 1 rollout x 3 stale updates = 9 states, the rest 27
    assert effects.loc[(0.9, 3.0, "d_entropy"), "states"] == 9
    assert effects.loc[(0.6, 1.2, "d_entropy"), "states"] == 27
    assert effects.loc[(0.9, 3.0, "d_entropy"), "share"] == pytest.approx(0.25)
    expected = {"d_entropy": (0.002, -0.001), "positive_share": (0.01, -0.005),
                "d_logp_correct": (0.02, -0.01)}
    for metric, (parked, stayed) in expected.items():
        assert effects.loc[(0.9, 3.0, metric), "mean"] == pytest.approx(parked)
        assert effects.loc[(0.6, 1.2, metric), "mean"] == pytest.approx(stayed)


def test_the_table_puts_the_most_held_pair_first_and_estimates_none_below_ten_states():
    lines = bounds_effects_table(_branches(), "bapo", "ppo", "update >= 1")
    assert lines[2].startswith("| (0.6, 1.2) | 0.750 (27 states) | -0.001 [")
    assert lines[3].startswith("| (0.9, 3) | 0.250 (9 states) | not estimated |")
    # with no `where` update 0 counts too: over 10 rollouts the parked pair holds 12 of 120
    wider = bounds_effects_table(_branches(10), "bapo", "ppo", None)
    assert "0.100 (12 states)" in wider[3]
    assert "not estimated" not in wider[3]


def test_missing_arms_are_said_not_raised():
    only_ppo = _branches().query("arm == 'ppo'")
    assert bounds_effects_table(only_ppo, "bapo", "ppo", None) == ["No bapo and ppo arms in these studies."]
