"""m2po by hand and against a literal transcription of the M2PO paper's procedure.

Reference: M2 = 1/N sum (log r)^2; while the remaining tokens' M2 > tau, mask the one with
the largest (log r)^2; then J = 1/N sum_t M_t r_t A_t over all N tokens.
"""

from __future__ import annotations

import math

import pytest
import torch

from src.algorithms import CLIP_STATES, METHOD_DEFAULTS, build_method, policy_loss
from src.algorithms.methods.m2po import second_moment_mask

F64 = torch.float64


def test_defaults():
    assert METHOD_DEFAULTS["m2po"] == {"tau": 0.04}


def run(log_r, adv, mask=None, **params):
    log_r = torch.tensor(log_r, dtype=F64)
    logp = log_r.clone().requires_grad_()  # logp_behavior = 0: log r = logp exactly
    m = torch.ones_like(log_r, dtype=torch.bool) if mask is None else torch.tensor(mask)
    out = policy_loss("m2po", logp, torch.zeros_like(log_r), torch.tensor(adv, dtype=F64), m,
                      **params)
    out.loss.backward()
    return out, logp.grad


def test_masks_the_largest_until_the_second_moment_fits():
    # (log r)^2 = [0.25, 0.01, 0.0025, 0.09, 0]: M2 = 0.3525/5 = 0.0705 > 0.04;
    # masking 0.25 leaves 0.1025/4 = 0.025625 <= 0.04: one token masked.
    # J = (-e^-0.1 + e^0.05 + e^0.3 - 1) / 5 (masked token adds 0 and still counts in N = 5)
    log_r = [[0.5, -0.1, 0.05, 0.3, 0.0]]
    adv = [[1.0, -1.0, 1.0, 1.0, -1.0]]
    out, grad = run(log_r, adv)
    assert [CLIP_STATES[s] for s in out.clip_state[0].tolist()] == ["masked"] + ["none"] * 4
    j = (-math.exp(-0.1) + math.exp(0.05) + math.exp(0.3) - 1.0) / 5
    assert out.loss.item() == pytest.approx(-j, rel=1e-12)
    r = [math.exp(x) for x in log_r[0]]
    expected = [0.0] + [-(r[i] * adv[0][i]) / 5 for i in range(1, 5)]
    torch.testing.assert_close(grad[0], torch.tensor(expected, dtype=F64), rtol=1e-12, atol=0)
    m = out.metrics
    assert m["m2"] == pytest.approx(0.0705) and m["m2_kept"] == pytest.approx(0.025625)
    assert m["m2_masked_tokens"] == 1 and m["masked_frac"] == pytest.approx(1 / 5)
    assert m["clip_frac"] == pytest.approx(1 / 5)  # a masked token has no gradient
    assert (out.c_low, out.c_high) == (None, None)


def test_masks_two_and_breaks_ties_by_position():
    # squares [0.16, 0.25, 0.16, 0.0] -> M2 0.1425; without 0.25: 0.32/3 = 0.107 > 0.04;
    # then one of the two 0.16: the earlier one, (0.16)/2 = 0.08 > 0.04; then the other:
    # 0/1 = 0: three masked.
    out, _ = run([[0.4, -0.5, -0.4, 0.0]], [[1.0, 1.0, 1.0, 1.0]])
    assert out.clip_state[0].tolist() == [4, 4, 4, 0]
    # tau = 0.1: masking 0.25 leaves 0.107 > 0.1, then the first 0.16 leaves 0.08: two masked,
    # the earlier of the tie first
    out, _ = run([[0.4, -0.5, -0.4, 0.0]], [[1.0, 1.0, 1.0, 1.0]], tau=0.1)
    assert out.clip_state[0].tolist() == [4, 4, 0, 0]


def test_nothing_masked_on_policy():
    out, grad = run([[0.0, 0.0, 0.0]], [[1.0, -1.0, 0.5]])
    assert bool((out.clip_state == 0).all()) and out.metrics["m2"] == 0.0
    torch.testing.assert_close(grad[0], torch.tensor([-1.0, 1.0, -0.5], dtype=F64) / 3)


def m2po_reference(log_r, mask, tau):
    """The masking loop as the paper states it, on plain floats."""
    tokens = [(i, t) for i in range(len(log_r)) for t in range(len(log_r[0])) if mask[i][t]]
    kept = list(tokens)
    masked = set()

    def m2(ts):
        return sum(log_r[i][t] ** 2 for i, t in ts) / len(ts) if ts else 0.0

    while kept and m2(kept) > tau:
        worst = max(kept, key=lambda it: (log_r[it[0]][it[1]] ** 2, -tokens.index(it)))
        kept.remove(worst)
        masked.add(worst)
    return masked, tokens


@pytest.mark.parametrize("seed", range(10))
def test_equals_the_papers_procedure(seed):
    g = torch.Generator().manual_seed(seed)
    b, t = 4, 6
    logp_old = -torch.rand(b, t, generator=g, dtype=F64)
    logp = (logp_old + 0.3 * torch.randn(b, t, generator=g, dtype=F64)).requires_grad_()
    mask = torch.rand(b, t, generator=g) < 0.8
    mask[0, 0] = True
    adv = torch.randn(b, generator=g, dtype=F64)
    out = policy_loss("m2po", logp, logp_old, adv, mask)
    (grad,) = torch.autograd.grad(out.loss, logp)
    log_r = (logp.detach() - logp_old).tolist()
    masked, tokens = m2po_reference(log_r, mask.tolist(), 0.04)
    assert {tuple(x) for x in (out.clip_state == 4).nonzero().tolist()} == masked
    # J = 1/N sum M r A, with autograd through the kept tokens' ratios
    ref = -sum(torch.exp(logp[i, j] - logp_old[i, j]) * adv[i]
               for i, j in tokens if (i, j) not in masked) / len(tokens)
    (ref_grad,) = torch.autograd.grad(ref, logp)
    torch.testing.assert_close(out.loss, ref, rtol=1e-10, atol=1e-13)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-10, atol=1e-13)


def test_everything_masked_when_no_token_fits():
    mask = torch.ones(1, 3, dtype=torch.bool)
    assert second_moment_mask(torch.tensor([[0.5, -0.6, 0.7]]), mask, 0.04).all()


def test_decision_taken_once_is_shared_by_the_micro_batches():
    g = torch.Generator().manual_seed(5)
    logp_old = -torch.rand(6, 4, generator=g, dtype=F64)
    logp = logp_old + 0.3 * torch.randn(6, 4, generator=g, dtype=F64)
    mask = torch.ones(6, 4, dtype=torch.bool)
    adv = torch.randn(6, generator=g, dtype=F64)
    method = build_method("m2po")
    decision = method.decide(method.decision_inputs(logp, logp_old, adv, mask))
    whole = method.loss(logp, logp_old, adv, mask, decision)
    den = method.denominator(mask, decision)
    parts = sum(method.loss(logp[s], logp_old[s], adv[s], mask[s], decision.take(s, 4),
                            denominator=den).loss for s in (slice(0, 2), slice(2, 6)))
    torch.testing.assert_close(parts, whole.loss, rtol=1e-12, atol=1e-15)


def test_bad_tau_names_itself():
    with pytest.raises(ValueError, match="^tau must be > 0"):
        build_method("m2po", {"tau": 0.0})
