"""Token entropy and the top-q entropy mask (docs/methods.md, top_entropy)."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from src.algorithms import token_entropy, top_q_mask

INF = math.inf


def literal_entropy(row: list[float]) -> float:
    """H = -sum p log p with p = softmax(row), in plain Python doubles (max-shifted)."""
    m = max(row)
    exps = [math.exp(x - m) if x != -INF else 0.0 for x in row]
    z = sum(exps)
    return -sum((e / z) * math.log(e / z) for e in exps if e > 0)


@pytest.mark.parametrize(
    ("logits", "expected"),
    [
        ([0.0, 0.0], math.log(2)),                       # uniform over 2
        ([3.0, 3.0, 3.0, 3.0], math.log(4)),             # uniform over 4, shifted
        # p = [1/4, 3/4]: H = -(1/4 ln 1/4 + 3/4 ln 3/4) = 0.5623351446188083
        ([0.0, math.log(3.0)], -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))),
        ([0.0, 0.0, -INF], math.log(2)),                 # masked vocabulary entry adds 0
        ([-INF, 5.0, -INF, -INF], 0.0),                  # one live entry: deterministic
        ([1e4, 1e4, 0.0], math.log(2)),                  # exp(1e4) overflows if done naively
        ([1e4, 0.0, -1e4], 0.0),
        ([-1e4, -1e4], math.log(2)),
    ],
)
def test_hand_cases(logits, expected):
    h = token_entropy(torch.tensor([logits]))
    assert h.shape == (1,)
    assert math.isfinite(float(h[0]))
    assert float(h[0]) == pytest.approx(expected, abs=1e-6)


def test_shape_and_literal_formula_on_random_logits():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 17, generator=gen, dtype=torch.float64) * 4
    logits[0, 1, :5] = -INF
    h = token_entropy(logits)
    assert h.shape == (2, 3)
    expected = torch.tensor([[literal_entropy(logits[i, j].tolist()) for j in range(3)]
                             for i in range(2)])
    torch.testing.assert_close(h.double(), expected.double(), rtol=1e-5, atol=1e-5)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.floats(-1e4, 1e4), st.just(-INF)), min_size=1, max_size=12)
       .filter(lambda xs: any(x != -INF for x in xs)))
def test_entropy_matches_literal_formula(row):
    h = float(token_entropy(torch.tensor([row], dtype=torch.float64))[0])
    assert math.isfinite(h)
    assert 0.0 <= h <= math.log(len(row)) + 1e-5
    assert h == pytest.approx(literal_entropy(row), abs=1e-4)


# --------------------------------------------------------------------------- top-q mask


def test_q_02_of_10_keeps_2():
    entropy = torch.tensor([0.1, 0.9, 0.3, 0.2, 0.8, 0.0, 0.4, 0.5, 0.6, 0.7])
    keep = top_q_mask(entropy, torch.ones(10, dtype=torch.bool), 0.2)
    # ceil(0.2 * 10) = 2, the two highest are 0.9 (index 1) and 0.8 (index 4)
    assert keep.nonzero().squeeze(1).tolist() == [1, 4]


@pytest.mark.parametrize(("q", "k"), [(0.3, 3), (0.7, 7), (0.1, 1), (0.01, 1), (1.0, 10),
                                      (0.15, 2), (0.21, 3)])
def test_count_is_ceil_of_decimal_q_times_n(q, k):
    # 0.3 * 10 == 3.0000000000000004 and 0.7 * 10 == 7.000000000000001 in binary floats:
    # the mask must still keep 3 and 7 tokens (ceil of the decimal product).
    keep = top_q_mask(torch.arange(10.0), torch.ones(10, dtype=torch.bool), q)
    assert int(keep.sum()) == k
    assert keep.nonzero().squeeze(1).tolist() == list(range(10 - k, 10))  # the highest k


def test_ties_earlier_index_wins():
    # all equal -> the first ceil(0.2*10) = 2 positions
    keep = top_q_mask(torch.zeros(10), torch.ones(10, dtype=torch.bool), 0.2)
    assert keep.nonzero().squeeze(1).tolist() == [0, 1]
    # tie at the threshold: 2.0 is kept; of the three 1.5s, the earliest (index 3) wins
    h = torch.tensor([0.1, 2.0, 0.3, 1.5, 0.2, 1.5, 0.4, 0.1, 1.5, 0.0])
    keep = top_q_mask(h, torch.ones(10, dtype=torch.bool), 0.2)
    assert keep.nonzero().squeeze(1).tolist() == [1, 3]


def test_ties_row_major_and_mask_respected_2d():
    # [B=2, T=5]; row 0 position 4 and row 1 position 0 tie at 1.5; the padded 9.0 is ignored
    h = torch.tensor([[0.1, 2.0, 0.3, 0.2, 1.5],
                      [1.5, 0.4, 0.1, 9.0, 0.3]])
    mask = torch.tensor([[True, True, True, True, True],
                         [True, True, True, False, True]])
    keep = top_q_mask(h, mask, 0.2)  # N = 9 -> ceil(1.8) = 2
    assert keep.shape == h.shape and keep.dtype == torch.bool
    assert keep.nonzero().tolist() == [[0, 1], [0, 4]]
    keep = top_q_mask(h, mask, 0.3)  # ceil(2.7) = 3 -> adds (1, 0)
    assert keep.nonzero().tolist() == [[0, 1], [0, 4], [1, 0]]
    assert not bool((keep & ~mask).any())


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.booleans()), min_size=1, max_size=40)
       .filter(lambda xs: any(m for _, m in xs)),
       st.one_of(st.sampled_from([0.2, 0.3, 0.5, 0.7, 1.0]), st.floats(1e-3, 1.0)))
def test_mask_matches_literal_sort(cells, q):
    # entropies drawn from few integer values, so ties are common
    h = torch.tensor([float(e) for e, _ in cells])
    mask = torch.tensor([m for _, m in cells])
    keep = top_q_mask(h, mask, q)
    n = sum(m for _, m in cells)
    k = math.ceil(Decimal(repr(q)) * n)
    ranked = sorted((i for i, (_, m) in enumerate(cells) if m), key=lambda i: (-cells[i][0], i))
    assert keep.nonzero().squeeze(1).tolist() == sorted(ranked[:k])


@pytest.mark.parametrize("q", [0.0, -0.1, 1.5, 1.0000001, float("nan"), "0.2", None])
def test_q_outside_range_is_rejected(q):
    with pytest.raises(ValueError, match=r"q must be in \(0, 1\]"):
        top_q_mask(torch.zeros(4), torch.ones(4, dtype=torch.bool), q)


def test_mask_errors_name_the_mask():
    with pytest.raises(ValueError, match="mask selects no tokens"):
        top_q_mask(torch.zeros(4), torch.zeros(4, dtype=torch.bool), 0.2)
    with pytest.raises(ValueError, match=r"mask has shape \(3,\)"):
        top_q_mask(torch.zeros(4), torch.ones(3, dtype=torch.bool), 0.2)
