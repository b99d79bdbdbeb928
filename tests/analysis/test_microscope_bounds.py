"""An adaptive rule against its reference within each bounds pair it chose:
analysis/reports/microscope_bounds.py.

The table is built by hand: bapo parks at (0.9, 3.0) on the states of rollout 0 and stays at
(0.6, 1.2) elsewhere, and its effect on each metric differs between the two, so each pair's
mean is known before the code runs."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest

from analysis.claims.microscope import Claim
from analysis.reports.microscope_bounds import (
    adaptive_arms,
    bounds_effects_table,
    bounds_section,
    effects_by_bounds,
    split_groups,
)

METRICS = ["d_entropy", "positive_share", "d_logp_correct"]


def _claim(claim_id: str, metric: str, arm: str = "bapo", ref: str | None = "ppo",
           where: str | None = "update >= 1", table: str = "branches") -> Claim:
    return Claim(id=claim_id, claim=claim_id, table=table, metric=metric, arm=arm,
                 direction="up", paper="p", expect=f"{claim_id} expected", ref=ref, where=where)


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
    effects = effects_by_bounds(_branches(), "bapo", "ppo", "update >= 1", METRICS).set_index(
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
    rows = [_claim("A", "d_entropy"), _claim("B", "positive_share")]
    lines = bounds_effects_table(_branches(), rows)
    assert lines[0] == ("| bapo: (c_low, c_high) | share of its states | d_entropy, bapo - ppo | "
                        "positive_share, bapo - ppo |")
    assert lines[2].startswith("| (0.6, 1.2) | 0.750 (27 states) | -0.001 [")
    assert lines[3] == "| (0.9, 3) | 0.250 (9 states) | not estimated | not estimated |"
    # with no `where` update 0 counts too: over 10 rollouts the parked pair holds 12 of 120
    wider = bounds_effects_table(_branches(10), [_claim("A", "d_entropy", where=None)])
    assert "0.100 (12 states)" in wider[3] and "not estimated" not in wider[3]


def test_only_rows_pooling_an_adaptive_arm_against_a_reference_are_split():
    table = _branches()
    assert adaptive_arms(table) == {"bapo"}  # ppo's bounds are (0.8, 1.2) at every state
    rows = [_claim("A", "d_entropy"), _claim("B", "positive_share"),
            _claim("C", "d_entropy", where="update >= 1 and rollout > 0"),
            _claim("D", "d_entropy", arm="ppo", ref="bapo"),  # a fixed rule: not split
            _claim("E", "d_entropy", ref=None),  # no reference
            _claim("F", "sampled_accuracy", table="horizons")]
    groups = split_groups(rows, table)
    assert {k: [c.id for c in v] for k, v in groups.items()} == {
        ("bapo", "ppo", "update >= 1"): ["A", "B"],
        ("bapo", "ppo", "update >= 1 and rollout > 0"): ["C"]}
    section = bounds_section(table, rows)
    assert 'A, expected before the runs "A expected"; B, expected' in "\n".join(section)
    # rollout 0 is where bapo parks, so C's states hold one pair only
    assert "No bapo states" not in "\n".join(section)


def test_a_row_with_no_states_yet_says_so_and_no_row_to_split_writes_nothing():
    table = _branches()
    empty = [_claim("G", "d_entropy", where="minibatch == 32")]
    assert bounds_effects_table(table, empty) == ["No bapo states on `minibatch == 32` yet."]
    assert bounds_section(table.query("arm == 'ppo'"), [_claim("A", "d_entropy")]) == []
