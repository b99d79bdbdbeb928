"""cispo by hand and against a literal transcription of MiniMax-M1's CISPO objective.

Reference (the paper's section 3.1):
    J = 1/sum_i |o_i| * sum_{i,t} sg(r_hat_{i,t}) * A_{i,t} * log pi_theta(o_{i,t}),
    r_hat = clip(r, 1 - eps_low, 1 + eps_high)
Every token keeps a gradient, sg(r_hat) A; a clipped weight shows as trunc_low/trunc_high.
"""

from __future__ import annotations

import math

import pytest
import torch

from src.algorithms import CLIP_STATES, METHOD_DEFAULTS, build_method, policy_loss

F64 = torch.float64


def test_defaults():
    assert METHOD_DEFAULTS["cispo"] == {"eps_low": 10.0, "eps_high": 0.2}


def names(state):
    return [[CLIP_STATES[s] for s in row] for row in state.tolist()]


def test_by_hand():
    # ratios [1.5, 0.5, 1.0] (logp_b = logp - log r), A per token [+1, -1, +2], defaults:
    #   weights clip(r, -9, 1.2) = [1.2, 0.5, 1.0]; states [trunc_high, none, none]
    #   J = sum w A logp / 3; dJ/dlogp = w A / 3 = [0.4, -1/6, 2/3]; loss = -J
    logp = torch.tensor([[-0.5, -1.0, -2.0]], dtype=F64, requires_grad=True)
    r = torch.tensor([[1.5, 0.5, 1.0]], dtype=F64)
    adv = torch.tensor([[1.0, -1.0, 2.0]], dtype=F64)
    out = policy_loss("cispo", logp, logp.detach() - r.log(), adv, torch.ones(1, 3, dtype=torch.bool))
    out.loss.backward()
    j = (1.2 * 1 * -0.5 + 0.5 * -1 * -1.0 + 1.0 * 2 * -2.0) / 3
    assert out.loss.item() == pytest.approx(-j, rel=1e-12)
    torch.testing.assert_close(logp.grad, torch.tensor([[-0.4, 1 / 6, -2 / 3]], dtype=F64),
                               rtol=1e-12, atol=0)
    assert names(out.clip_state) == [["trunc_high", "none", "none"]]
    assert (out.c_low, out.c_high) == (1 - 10.0, 1.2)
    m = out.metrics
    assert m["clip_frac"] == 0.0  # no token lost its gradient
    assert m["trunc_high_frac"] == pytest.approx(1 / 3) and m["trunc_low_frac"] == 0.0
    # gradient reading: |w A|: pos 1.2 + 2.0, neg 0.5
    assert (m["contrib_grad_pos"], m["contrib_grad_neg"]) == (pytest.approx(3.2), pytest.approx(0.5))

    # A lower bound that binds: eps_low = 0.2 raises the r=0.5 weight to 0.8.
    logp.grad = None
    out = policy_loss("cispo", logp, logp.detach() - r.log(), adv, torch.ones(1, 3, dtype=torch.bool),
                      eps_low=0.2)
    out.loss.backward()
    assert names(out.clip_state) == [["trunc_high", "trunc_low", "none"]]
    torch.testing.assert_close(logp.grad, torch.tensor([[-0.4, 0.8 / 3, -2 / 3]], dtype=F64),
                               rtol=1e-12, atol=0)


def cispo_reference(logp, logp_old, adv, mask, eps_low, eps_high):
    """-J of the paper, one token at a time."""
    total, n = 0.0, 0
    for i in range(logp.shape[0]):
        for t in range(logp.shape[1]):
            if not mask[i, t]:
                continue
            r = math.exp(float(logp[i, t].detach()) - float(logp_old[i, t]))
            r_hat = min(max(r, 1 - eps_low), 1 + eps_high)  # a number: sg() by construction
            total = total + r_hat * float(adv[i, t]) * logp[i, t]
            n += 1
    return -total / n


@pytest.mark.parametrize("eps_low", [10.0, 0.2])
@pytest.mark.parametrize("seed", range(6))
def test_equals_the_papers_objective(seed, eps_low):
    g = torch.Generator().manual_seed(seed)
    b, t = 5, 6
    logp_old = -2 * torch.rand(b, t, generator=g, dtype=F64)
    logp = (logp_old + 0.4 * torch.randn(b, t, generator=g, dtype=F64)).requires_grad_()
    mask = torch.rand(b, t, generator=g) < 0.75
    mask[0, 0] = True
    adv = torch.randn(b, 1, generator=g, dtype=F64).expand(b, t)
    out = policy_loss("cispo", logp, logp_old, adv, mask, eps_low=eps_low)
    (grad,) = torch.autograd.grad(out.loss, logp)
    ref = cispo_reference(logp, logp_old, adv, mask, eps_low, 0.2)
    (ref_grad,) = torch.autograd.grad(ref, logp)
    torch.testing.assert_close(out.loss, ref, rtol=1e-10, atol=1e-13)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-10, atol=1e-13)
    # every loss-bearing token with A != 0 keeps a gradient
    assert bool((grad[mask & (adv != 0)] != 0).all())


def test_padding_may_hold_nan():
    logp = torch.tensor([[-0.5, math.nan]], dtype=F64, requires_grad=True)
    out = policy_loss("cispo", logp, torch.tensor([[-0.4, math.nan]], dtype=F64),
                      torch.tensor([1.0], dtype=F64), torch.tensor([[True, False]]))
    out.loss.backward()
    assert math.isfinite(out.loss.item()) and bool(torch.isfinite(logp.grad).all())


@pytest.mark.parametrize(("params", "match"), [({"eps_low": 0.0}, "^eps_low must be"),
                                               ({"eps_high": 0.0}, "^eps_high must be")])
def test_bad_parameters_name_themselves(params, match):
    with pytest.raises(ValueError, match=match):
        build_method("cispo", params)

