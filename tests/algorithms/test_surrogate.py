"""Clip states, the clipped surrogate and loss aggregation, by hand (docs/methods.md)."""

from __future__ import annotations

import pytest
import torch

from src.algorithms import AGGREGATIONS, CLIP_STATES, aggregate, clip_states, surrogate

F64 = torch.float64

# (ratio, advantage, expected J with bounds [0.8, 1.2], expected state) -- worked by hand:
#   J = min(r*A, clip(r, 0.8, 1.2)*A)
HAND = [
    (1.0, 1.0, 1.0, "none"),        # min(1.0, 1.0)
    (1.5, 1.0, 1.2, "clip_high"),   # min(1.5, 1.2): A>0, r>c_high -> no gradient
    (0.5, 1.0, 0.5, "none"),        # min(0.5, 0.8): A>0, r<c_low keeps its gradient
    (0.5, -1.0, -0.8, "clip_low"),  # min(-0.5, -0.8): A<0, r<c_low -> no gradient
    (1.5, -1.0, -1.5, "none"),      # min(-1.5, -1.2): A<0, r>c_high keeps its gradient
    (1.1, -2.0, -2.2, "none"),      # inside the bounds
    (1.5, 0.0, 0.0, "none"),        # A = 0 is never clipped
    (0.5, 0.0, 0.0, "none"),
    (1.25, 0.5, 0.6, "clip_high"),  # min(0.625, 0.6)
]


def test_clip_states_constants():
    # The first four codes are stored in old token files: they never move.
    assert CLIP_STATES[:4] == ("none", "clip_low", "clip_high", "dual")
    assert CLIP_STATES[4:8] == ("masked", "trunc_low", "trunc_high", "kl_penalty")
    # the 2025-26 clip family's, appended after them (sapo, gppo, aspo)
    assert CLIP_STATES[8:] == ("gated", "preserved_low", "preserved_high", "dual_capped")
    assert AGGREGATIONS == ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def test_hand_surrogate_and_states():
    r = torch.tensor([h[0] for h in HAND], dtype=F64)
    a = torch.tensor([h[1] for h in HAND], dtype=F64)
    j = surrogate(r, a, 0.8, 1.2)
    torch.testing.assert_close(j, torch.tensor([h[2] for h in HAND], dtype=F64),
                               rtol=0, atol=1e-15)
    states = clip_states(r, a, 0.8, 1.2)
    assert states.dtype == torch.int8
    assert [CLIP_STATES[s] for s in states.tolist()] == [h[3] for h in HAND]


def test_gradient_per_token_is_a_times_r_or_exactly_zero():
    # dJ/dlogp = dJ/dr * r = A*r on the unclipped side, 0 on the clipped one.
    r0 = torch.tensor([h[0] for h in HAND], dtype=F64)
    a = torch.tensor([h[1] for h in HAND], dtype=F64)
    logp = r0.log().requires_grad_()
    surrogate(logp.exp(), a, 0.8, 1.2).sum().backward()
    expected = [0.0 if state != "none" else ra * aa for ra, aa, _, state in HAND]
    torch.testing.assert_close(logp.grad, torch.tensor(expected, dtype=F64), rtol=1e-12, atol=0)
    clipped = torch.tensor([h[3] != "none" for h in HAND])
    assert bool((logp.grad[clipped] == 0).all())


def test_dual_clip_by_hand():
    # dual_clip_c = 3, bounds [0.8, 1.2]; for A<0: J = max(min(rA, clip(r)A), 3A)
    r = torch.tensor([4.0, 2.0, 4.0, 0.5, 3.5], dtype=F64)
    a = torch.tensor([-1.0, -1.0, 1.0, -1.0, -2.0], dtype=F64)
    # r=4,A=-1: min(-4,-1.2)=-4 -> max(-4,-3)=-3, dual (no gradient)
    # r=2,A=-1: min(-2,-1.2)=-2 -> max(-2,-3)=-2, none (gradient A*r=-2)
    # r=4,A=+1: dual-clip only acts on A<0: min(4,1.2)=1.2, clip_high
    # r=.5,A=-1: min(-.5,-.8)=-.8 -> max(-.8,-3)=-.8, clip_low
    # r=3.5,A=-2: min(-7,-2.4)=-7 -> max(-7,-6)=-6, dual
    logp = r.log().requires_grad_()
    j = surrogate(logp.exp(), a, 0.8, 1.2, dual_clip_c=3.0)
    torch.testing.assert_close(j.detach(), torch.tensor([-3.0, -2.0, 1.2, -0.8, -6.0], dtype=F64),
                               rtol=0, atol=1e-12)
    states = clip_states(r, a, 0.8, 1.2, dual_clip_c=3.0)
    assert [CLIP_STATES[s] for s in states.tolist()] == [
        "dual", "none", "clip_high", "clip_low", "dual"]
    j.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([0.0, -2.0, 0.0, 0.0, 0.0], dtype=F64),
                               rtol=1e-12, atol=0)
    assert logp.grad[0].item() == 0.0 and logp.grad[4].item() == 0.0
    # without dual-clip the r=4, A<0 token keeps its gradient: J = -4, state none
    assert surrogate(r, a, 0.8, 1.2)[0].item() == pytest.approx(-4.0)
    assert clip_states(r, a, 0.8, 1.2)[0].item() == CLIP_STATES.index("none")


# token loss [B=3, T=4], mask with padding and one response that bears no loss
LOSS = torch.tensor([[1.0, 2.0, 3.0, 100.0],
                     [4.0, 100.0, 100.0, 100.0],
                     [100.0, 100.0, 100.0, 100.0]], dtype=F64)
MASK = torch.tensor([[True, True, True, False],
                     [True, False, False, False],
                     [False, False, False, False]])


@pytest.mark.parametrize(
    ("mode", "norm_length", "expected"),
    [
        # (1 + 2 + 3 + 4) / 4 tokens
        ("token-mean", None, 2.5),
        # per response: 6/3 = 2 and 4/1 = 4; the empty response is skipped: (2 + 4) / 2
        ("seq-mean-token-mean", None, 3.0),
        # per-response sums 6, 4, 0 over T = 4, then the mean over all 3 responses: 10 / 12
        ("seq-mean-token-sum-norm", None, 10.0 / 12.0),
        # with a fixed normaliser of 5: 10 / (3 * 5)
        ("seq-mean-token-sum-norm", 5, 10.0 / 15.0),
    ],
)
def test_aggregation_by_hand(mode, norm_length, expected):
    out = aggregate(LOSS, MASK, mode, norm_length)
    assert out.item() == pytest.approx(expected, rel=1e-15)


def test_aggregation_token_mean_accepts_1d():
    assert aggregate(torch.tensor([1.0, 3.0, 9.0]), torch.tensor([True, True, False])).item() == 2.0


def test_aggregation_errors():
    with pytest.raises(ValueError, match="aggregation must be one of"):
        aggregate(LOSS, MASK, "sum")
    with pytest.raises(ValueError, match=r"needs \[B, T\]"):
        aggregate(torch.ones(3), torch.ones(3, dtype=torch.bool), "seq-mean-token-mean")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_clipped_token_at_a_rounding_tie_gets_no_gradient(dtype):
    """r one ulp past c_high with r*A == c_high*A after rounding: the state is clip_high, so
    the gradient is exactly 0 (torch.minimum would give it half at the tie); one ulp below
    c_low with A>0 (state none) the tie must not halve the gradient either."""
    c_low, c_high = 0.8, 1.2
    high = torch.tensor(c_high, dtype=dtype).clamp(c_low, c_high)
    low = torch.tensor(c_low, dtype=dtype).clamp(c_low, c_high)
    above = torch.nextafter(high, torch.tensor(2.0, dtype=dtype))
    below = torch.nextafter(low, torch.tensor(0.0, dtype=dtype))
    a = torch.linspace(0.1, 3.0, 20001, dtype=dtype)
    tie_high = a[above * a == high * a][:3]
    tie_low = a[below * a == low * a][:3]
    assert tie_high.numel() == 3 and tie_low.numel() == 3  # ties exist at both bounds
    r = torch.cat([above.expand(3), below.expand(3)])
    adv = torch.cat([tie_high, tie_low])
    logp = r.log().detach().requires_grad_()
    ratio = logp.exp()
    assert torch.equal(ratio.detach(), r)
    states = [CLIP_STATES[s] for s in clip_states(ratio, adv, c_low, c_high).tolist()]
    assert states == ["clip_high"] * 3 + ["none"] * 3
    j = surrogate(ratio, adv, c_low, c_high)
    # the value is min(rA, clip(r)A), ties included
    torch.testing.assert_close(j.detach(), torch.minimum(r * adv, r.clamp(c_low, c_high) * adv),
                               rtol=0, atol=0)
    j.sum().backward()
    assert bool((logp.grad[:3] == 0).all())  # clipped: exactly no gradient
    # kept: dJ/dlogp = A r, whole
    torch.testing.assert_close(logp.grad[3:], adv[3:] * r[3:], rtol=0, atol=0)
    # The old form split the gradient at the tie; this test would catch a return to it.
    logp_old = r.log().detach().requires_grad_()
    rr = logp_old.exp()
    torch.minimum(rr * adv, rr.clamp(c_low, c_high) * adv).sum().backward()
    assert bool((logp_old.grad[:3] != 0).all())
