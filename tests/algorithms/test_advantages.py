"""Group-normalised advantages, checked against hand arithmetic (docs/methods.md, Notation)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from src.algorithms import group_advantages

EPS = 1e-6


def test_hand_worked_groups_with_std():
    # Three groups of G=4, group-major layout.
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0,   # g0: one correct
                            1.0, 1.0, 1.0, 1.0,   # g1: all correct -> degenerate
                            1.0, 1.0, 0.0, 0.0])  # g2: half correct
    out = group_advantages(rewards, 4)
    # g0: mean 0.25 -> centred [0.75, -0.25, -0.25, -0.25];
    #     unbiased var = (0.5625 + 3 * 0.0625) / 3 = 0.25 -> std 0.5
    #     A = centred / (0.5 + 1e-6)
    g0 = [0.75 / (0.5 + EPS)] + [-0.25 / (0.5 + EPS)] * 3
    # g1: all equal -> exactly 0
    g1 = [0.0] * 4
    # g2: mean 0.5 -> centred +-0.5; unbiased var = 4 * 0.25 / 3 = 1/3
    s2 = math.sqrt(1.0 / 3.0)
    g2 = [0.5 / (s2 + EPS)] * 2 + [-0.5 / (s2 + EPS)] * 2
    expected = torch.tensor(g0 + g1 + g2)
    torch.testing.assert_close(out.advantages, expected, rtol=1e-6, atol=1e-7)
    assert out.degenerate_groups == 1
    assert out.num_groups == 3
    assert out.advantages.dtype == torch.float32
    assert bool((out.advantages[4:8] == 0).all())  # exactly zero, not ~1e-17


def test_hand_worked_groups_without_std_dr_grpo():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.3, 0.3, 0.3, 0.3, 2.0, 0.0, 1.0, 1.0],
                           dtype=torch.float64)
    out = group_advantages(rewards, 4, scale_by_std=False)
    # g0: mean 0.25 -> [0.75, -0.25, -0.25, -0.25]; g1: degenerate -> 0;
    # g2: mean (2 + 0 + 1 + 1) / 4 = 1 -> [1, -1, 0, 0]
    expected = torch.tensor([0.75, -0.25, -0.25, -0.25, 0, 0, 0, 0, 1.0, -1.0, 0.0, 0.0],
                            dtype=torch.float64)
    torch.testing.assert_close(out.advantages, expected, rtol=0, atol=1e-15)
    assert out.degenerate_groups == 1
    assert out.advantages.dtype == torch.float64


@pytest.mark.parametrize("scale_by_std", [True, False])
@pytest.mark.parametrize("value", [0.1, 0.7, 1.0 / 3.0, 0.0, -2.5])
def test_degenerate_group_is_exactly_zero(value, scale_by_std):
    # mean(0.1, 0.1, 0.1) is not bitwise 0.1 in floating point; the result must still be 0.
    rewards = torch.tensor([value] * 3 + [1.0, 0.0, 0.0], dtype=torch.float64)
    out = group_advantages(rewards, 3, scale_by_std=scale_by_std)
    assert out.advantages[:3].tolist() == [0.0, 0.0, 0.0]
    assert out.degenerate_groups == 1
    assert not bool(torch.isnan(out.advantages).any())


def test_all_groups_degenerate():
    out = group_advantages(torch.ones(8), 4)
    assert out.advantages.tolist() == [0.0] * 8
    assert out.degenerate_groups == 2 and out.num_groups == 2


def test_integer_rewards_give_float_advantages():
    out = group_advantages(torch.tensor([1, 0]), 2, scale_by_std=False)
    assert out.advantages.dtype == torch.float32
    assert out.advantages.tolist() == [0.5, -0.5]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0.0, 1.0]), min_size=2, max_size=8).map(tuple),
                min_size=1, max_size=6).filter(lambda gs: len({len(g) for g in gs}) == 1),
       st.booleans())
def test_binary_rewards_match_python_formula(groups, scale_by_std):
    g = len(groups[0])
    rewards = torch.tensor([x for grp in groups for x in grp], dtype=torch.float64)
    out = group_advantages(rewards, g, scale_by_std=scale_by_std)
    expected, degenerate = [], 0
    for grp in groups:
        mean = sum(grp) / g
        std = math.sqrt(sum((x - mean) ** 2 for x in grp) / (g - 1))  # unbiased
        if all(x == grp[0] for x in grp):
            degenerate += 1
            expected += [0.0] * g
        else:
            expected += [(x - mean) / (std + EPS) if scale_by_std else x - mean for x in grp]
    assert out.degenerate_groups == degenerate
    assert out.num_groups == len(groups)
    torch.testing.assert_close(out.advantages, torch.tensor(expected, dtype=torch.float64),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("rewards", "group_size", "match"),
    [
        (torch.zeros(2, 4), 4, "rewards must be 1-D"),
        (torch.zeros(6), 4, "multiple of group_size"),
        (torch.zeros(0), 2, "multiple of group_size"),
        (torch.zeros(4), 1, "group_size must be >= 2"),
        (torch.tensor([1.0, float("nan")]), 2, "rewards contains NaN"),
        (torch.tensor([1.0, float("inf")]), 2, "rewards contains NaN or inf"),
    ],
)
def test_bad_input(rewards, group_size, match):
    with pytest.raises(ValueError, match=match):
        group_advantages(rewards, group_size)
