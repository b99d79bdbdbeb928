"""kl_cov by hand and against a literal transcription of KL-Cov (arXiv 2505.22617).

Reference: no clip; J_t = r_t A_t, minus coef * |log r_t| on the top max(1, floor(ratio N))
tokens by cov_t = (A_t - mean A)(log pi_t - mean log pi); token mean over all N tokens.
"""

from __future__ import annotations

import math

import pytest
import torch

from src.algorithms import CLIP_STATES, METHOD_DEFAULTS, build_method, policy_loss

F64 = torch.float64


def test_defaults_are_the_papers_7b_setting():
    assert METHOD_DEFAULTS["kl_cov"] == {"ratio": 2e-3, "coef": 1.0}


def test_by_hand():
    # A per token [3, -1, 1, -3] (mean 0); logp = [0, -2, -1, -1] (mean -1):
    # cov = [3, 1, 0, 0]. log r = [0.1, 0.2, -0.1, 0]. ratio 0.25 -> k = 1: token 0 pays 1 * 0.1.
    # J = [3 e^0.1 - 0.1, -e^0.2, e^-0.1, -3]; loss = -mean J.
    # dJ/dlogp: token 0: 3 e^0.1 - 1 (d|log r|/dlogp = sign = 1); others A r.
    logp = torch.tensor([[0.0, -2.0, -1.0, -1.0]], dtype=F64, requires_grad=True)
    log_r = torch.tensor([[0.1, 0.2, -0.1, 0.0]], dtype=F64)
    adv = torch.tensor([[3.0, -1.0, 1.0, -3.0]], dtype=F64)
    out = policy_loss("kl_cov", logp, logp.detach() - log_r, adv, torch.ones(1, 4, dtype=torch.bool),
                      ratio=0.25)
    out.loss.backward()
    e = math.exp
    j = [3 * e(0.1) - 0.1, -e(0.2), e(-0.1), -3.0]
    assert out.loss.item() == pytest.approx(-sum(j) / 4, rel=1e-12)
    expected = [-(3 * e(0.1) - 1.0) / 4, e(0.2) / 4, -e(-0.1) / 4, 3.0 / 4]
    torch.testing.assert_close(logp.grad[0], torch.tensor(expected, dtype=F64), rtol=1e-12, atol=0)
    assert [CLIP_STATES[s] for s in out.clip_state[0].tolist()] == ["kl_penalty"] + ["none"] * 3
    m = out.metrics
    assert m["clip_frac"] == 0.0 and m["kl_penalty_frac"] == pytest.approx(0.25)
    assert (out.c_low, out.c_high) == (None, None)


def test_at_least_one_token_pays():
    # N = 4, ratio 2e-3: floor(0.008) = 0 -> 1 token, the one with the largest covariance
    logp = torch.tensor([[0.0, -2.0, -1.0, -1.0]], dtype=F64)
    adv = torch.tensor([[3.0, -1.0, 1.0, -3.0]], dtype=F64)
    out = policy_loss("kl_cov", logp, logp - 0.1, adv, torch.ones(1, 4, dtype=torch.bool))
    assert out.clip_state[0].tolist() == [7, 0, 0, 0]


def kl_cov_reference(logp, logp_old, adv, mask, ratio, coef):
    tokens = [(i, t) for i in range(logp.shape[0]) for t in range(logp.shape[1]) if mask[i, t]]
    n = len(tokens)
    lp = logp.detach()  # the selection reads numbers only
    mean_a = sum(float(adv[i, t]) for i, t in tokens) / n
    mean_lp = sum(float(lp[i, t]) for i, t in tokens) / n
    cov = {(i, t): (float(adv[i, t]) - mean_a) * (float(lp[i, t]) - mean_lp) for i, t in tokens}
    k = max(1, int(n * ratio))
    top = set(sorted(tokens, key=lambda it: (-cov[it], tokens.index(it)))[:k])
    loss = 0.0
    for i, t in tokens:
        log_r = logp[i, t] - logp_old[i, t]
        j = torch.exp(log_r) * adv[i, t]
        if (i, t) in top:
            j = j - coef * torch.abs(log_r)
        loss = loss - j
    return loss / n, top


@pytest.mark.parametrize("seed", range(8))
def test_equals_the_papers_objective(seed):
    g = torch.Generator().manual_seed(seed)
    b, t = 5, 6
    logp_old = -3 * torch.rand(b, t, generator=g, dtype=F64)
    logp = (logp_old + 0.5 * torch.randn(b, t, generator=g, dtype=F64)).requires_grad_()
    mask = torch.rand(b, t, generator=g) < 0.8
    mask[0, 0] = True
    adv = torch.randn(b, 1, generator=g, dtype=F64).expand(b, t)
    out = policy_loss("kl_cov", logp, logp_old, adv, mask, ratio=0.1, coef=0.7)
    (grad,) = torch.autograd.grad(out.loss, logp)
    ref, top = kl_cov_reference(logp, logp_old, adv, mask, 0.1, 0.7)
    assert {tuple(x) for x in (out.clip_state == 7).nonzero().tolist()} == top
    (ref_grad,) = torch.autograd.grad(ref, logp)
    torch.testing.assert_close(out.loss, ref, rtol=1e-10, atol=1e-13)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize(("params", "match"), [({"ratio": 1.5}, "^ratio must be"),
                                               ({"coef": -1.0}, "^coef must be >= 0")])
def test_bad_parameters_name_themselves(params, match):
    with pytest.raises(ValueError, match=match):
        build_method("kl_cov", params)

