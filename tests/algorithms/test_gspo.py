"""gspo by hand and against a literal transcription of the GSPO paper's objective.

Conventions: logp_behavior = 0, so log r_t = logp_t. The reference is the paper's
sequence-level objective, J = 1/G sum_i min(s_i A_i, clip(s_i, 1 - eps_l, 1 + eps_h) A_i)
with s_i = (pi_theta(y_i|x) / pi_old(y_i|x))^(1/|y_i|) and pi(y|x) the product of the
token probabilities; autograd through it gives GSPO's gradient, which the method's
GSPO-token form must match.
"""

from __future__ import annotations

import math

import pytest
import torch

from src.algorithms import CLIP_STATES, METHOD_DEFAULTS, build_method, policy_loss

F64 = torch.float64


def test_defaults_are_the_papers():
    assert METHOD_DEFAULTS["gspo"] == {"eps_low": 3e-4, "eps_high": 4e-4}


def test_by_hand():
    # Row 0, A=+1: log r = [0.003, -0.001, 0.001] -> mean 0.001, s_0 = e^0.001 > 1.0004:
    #   the whole response is clipped high: J = 1.0004 per token, no gradient.
    # Row 1, A=-1, two tokens: log r = [0.0002, -0.0004] -> mean -0.0001, s_1 = e^-0.0001,
    #   inside [0.9997, 1.0004]: J = -s_1 per token, dJ/dlogp_t = s_1 * A = -s_1.
    # seq-mean-token-mean: loss = -(1.0004 - s_1) / 2; row 1's tokens get
    #   d loss / d logp_t = -(1/2)(1/2)(-s_1) = s_1 / 4.
    logp = torch.tensor([[0.003, -0.001, 0.001], [0.0002, -0.0004, 0.0]], dtype=F64,
                        requires_grad=True)
    mask = torch.tensor([[True, True, True], [True, True, False]])
    adv = torch.tensor([1.0, -1.0], dtype=F64)
    out = policy_loss("gspo", logp, torch.zeros_like(logp), adv, mask,
                      aggregation="seq-mean-token-mean")
    out.loss.backward()
    s1 = math.exp(-0.0001)
    assert out.loss.item() == pytest.approx(-(1.0004 - s1) / 2, rel=1e-12)
    assert [[CLIP_STATES[s] for s in row] for row in out.clip_state.tolist()] == [
        ["clip_high"] * 3, ["none", "none", "none"]]
    assert torch.equal(logp.grad[0], torch.zeros(3, dtype=F64))
    torch.testing.assert_close(logp.grad[1, :2], torch.full((2,), s1 / 4, dtype=F64),
                               rtol=1e-12, atol=0)
    assert logp.grad[1, 2].item() == 0.0  # padding
    assert (out.c_low, out.c_high) == (1 - 3e-4, 1 + 4e-4)
    torch.testing.assert_close(out.weight[1, :2], torch.full((2,), s1, dtype=F64))
    m = out.metrics
    assert m["clip_high_frac"] == pytest.approx(3 / 5) and m["clip_frac"] == pytest.approx(3 / 5)
    assert m["clip_frac_pos"] == 1.0 and m["clip_frac_neg"] == 0.0
    assert m["contrib_grad_pos"] == 0.0 and m["contrib_grad_neg"] == pytest.approx(2 * s1)


def test_clip_low_needs_a_negative_advantage():
    # s = e^-0.001 < 0.9997 for both rows: the A<0 response is clipped low (no gradient), the
    # A>0 one keeps its gradient (min picks s A), as in PPO.
    logp = torch.full((2, 2), -0.001, dtype=F64, requires_grad=True)
    out = policy_loss("gspo", logp, torch.zeros_like(logp), torch.tensor([-1.0, 1.0], dtype=F64),
                      torch.ones(2, 2, dtype=torch.bool), aggregation="seq-mean-token-mean")
    out.loss.backward()
    assert [[CLIP_STATES[s] for s in row] for row in out.clip_state.tolist()] == [
        ["clip_low"] * 2, ["none"] * 2]
    assert torch.equal(logp.grad[0], torch.zeros(2, dtype=F64))
    s = math.exp(-0.001)
    torch.testing.assert_close(logp.grad[1], torch.full((2,), -s / 4, dtype=F64), rtol=1e-12, atol=0)


def gspo_reference(logp, logp_old, adv, mask, eps_low, eps_high):
    """The paper's GSPO objective, transcribed: -1/G sum_i min(s_i A_i, clip(s_i) A_i)."""
    terms = []
    for i in range(logp.shape[0]):
        n = int(mask[i].sum())
        if n == 0:
            continue  # a response with no token bears no loss (seq-mean over bearing rows)
        p_new = torch.prod(torch.exp(logp[i][mask[i]]))  # pi_theta(y_i | x)
        p_old = torch.prod(torch.exp(logp_old[i][mask[i]]))  # pi_old(y_i | x)
        s = (p_new / p_old) ** (1.0 / n)
        clipped = torch.clamp(s, 1 - eps_low, 1 + eps_high)
        terms.append(torch.minimum(s * adv[i], clipped * adv[i]))
    return -sum(terms) / len(terms)


@pytest.mark.parametrize("seed", range(12))
def test_equals_the_papers_objective(seed):
    g = torch.Generator().manual_seed(seed)
    b, t = 6, 7
    # mean log-ratios around the tiny clip range, so both clipped and kept responses occur
    logp_old = -torch.rand(b, t, generator=g, dtype=F64)
    logp = (logp_old + 6e-4 * torch.randn(b, t, generator=g, dtype=F64)).requires_grad_()
    mask = torch.rand(b, t, generator=g) < 0.8
    mask[:, 0] = True
    adv = torch.randn(b, generator=g, dtype=F64)
    eps = METHOD_DEFAULTS["gspo"]
    out = policy_loss("gspo", logp, logp_old, adv, mask, aggregation="seq-mean-token-mean")
    (grad,) = torch.autograd.grad(out.loss, logp)
    ref = gspo_reference(logp, logp_old, adv, mask, eps["eps_low"], eps["eps_high"])
    (ref_grad,) = torch.autograd.grad(ref, logp)
    torch.testing.assert_close(out.loss, ref, rtol=1e-10, atol=1e-13)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-8, atol=1e-13)
    clipped = out.clip_state != 0
    assert torch.equal(grad[clipped], torch.zeros_like(grad[clipped]))  # clipped: exactly 0


def test_micro_batches_add_up_to_the_mini_batch():
    g = torch.Generator().manual_seed(3)
    logp_old = -torch.rand(8, 5, generator=g, dtype=F64)
    logp = (logp_old + 6e-4 * torch.randn(8, 5, generator=g, dtype=F64)).requires_grad_()
    mask = torch.ones(8, 5, dtype=torch.bool)
    adv = torch.randn(8, generator=g, dtype=F64)
    method = build_method("gspo", aggregation="seq-mean-token-mean")
    whole = method.loss(logp, logp_old, adv, mask)
    den = method.denominator(mask, whole.decision)
    parts = sum(method.loss(logp[s], logp_old[s], adv[s], mask[s], denominator=den).loss
                for s in (slice(0, 3), slice(3, 8)))
    torch.testing.assert_close(parts, whole.loss, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize(("params", "match"), [({"eps_low": 0.0}, "^eps_low must be"),
                                               ({"eps_low": 1.0}, "^eps_low must be"),
                                               ({"eps_high": -1e-4}, "^eps_high must be")])
def test_bad_parameters_name_themselves(params, match):
    with pytest.raises(ValueError, match=match):
        build_method("gspo", params)

