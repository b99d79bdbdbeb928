"""clip_cov by hand and against a literal transcription of Clip-Cov (arXiv 2505.22617).

Reference: cov_t = (A_t - mean A)(log pi_t - mean log pi) over the batch's tokens; the
candidates are the tokens the clipped surrogate leaves alone with lb < cov_t < ub; a random
max(1, floor(ratio * N)) of them get loss 0 (and so no gradient); every other token has
the clipped surrogate min(r A, clip(r) A); token mean over all N tokens.
"""

from __future__ import annotations

import pytest
import torch

from src.algorithms import CLIP_STATES, METHOD_DEFAULTS, build_method, policy_loss

F64 = torch.float64


def test_defaults_are_the_authors():
    assert METHOD_DEFAULTS["clip_cov"] == {"c_low": 0.0, "c_high": 2.0, "dual_clip_c": None,
                                           "ratio": 2e-4, "lb": 1.0, "ub": 5.0}


def names(state):
    return [CLIP_STATES[s] for s in state.reshape(-1).tolist()]


def test_by_hand():
    # One response of 4 tokens, per-token A = [3, -1, 1, -3] (mean 0), logp = [0, -2, -1, -1]
    # (mean -1), on-policy (r = 1, nothing clipped): cov = A * (logp + 1) = [3, 1, 0, 0].
    # lb = 1 is strict, so only token 0 is a candidate; ratio 0.5 asks for 2, one exists.
    # J = [0 (detached), -1, 1, -3]: sum -3 over N = 4 -> loss 0.75.
    logp = torch.tensor([[0.0, -2.0, -1.0, -1.0]], dtype=F64, requires_grad=True)
    adv = torch.tensor([[3.0, -1.0, 1.0, -3.0]], dtype=F64)
    out = policy_loss("clip_cov", logp, logp.detach().clone(), adv, torch.ones(1, 4, dtype=torch.bool),
                      ratio=0.5)
    out.loss.backward()
    assert names(out.clip_state) == ["masked", "none", "none", "none"]
    assert out.loss.item() == pytest.approx(0.75, rel=1e-12)
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, 0.25, -0.25, 0.75]], dtype=F64),
                               rtol=1e-12, atol=0)
    m = out.metrics
    assert (m["cov_candidates"], m["cov_selected"]) == (1, 1)
    assert m["masked_frac"] == pytest.approx(0.25) and m["clip_frac"] == pytest.approx(0.25)


def test_clipped_tokens_are_no_candidates_and_the_draw_is_seeded():
    # Token 0 has the largest cov but r = 3 > c_high = 2 with A > 0: clipped already.
    # Tokens 1 and 2 are candidates (cov 2 and 2); N = 5 at the default ratio asks for
    # max(1, floor(5e-4 * 2)) = 1: one of them, drawn with the given seed.
    logp = torch.tensor([[1.0, 0.0, -2.0, -1.0, -1.0]], dtype=F64)
    lb = logp.clone()
    lb[0, 0] = 1.0 - torch.log(torch.tensor(3.0, dtype=F64))
    adv = torch.tensor([[4.0, 2.0, -2.0, -2.0, -2.0]], dtype=F64)  # mean 0
    # centred logp: mean -0.6 -> [1.6, 0.6, -1.4, -0.4, -0.4]; cov = [6.4, 1.2, 2.8, 0.8, 0.8]
    mask = torch.ones(1, 5, dtype=torch.bool)
    chosen = set()
    for seed in range(20):
        out = policy_loss("clip_cov", logp, lb, adv, mask, seed=seed)
        states = names(out.clip_state)
        assert states[0] == "clip_high" and states.count("masked") == 1
        assert states.index("masked") in (1, 2)
        chosen.add(states.index("masked"))
        again = policy_loss("clip_cov", logp, lb, adv, mask, seed=seed)
        assert torch.equal(again.clip_state, out.clip_state)  # same seed, same draw
    assert chosen == {1, 2}  # the draw is random over the candidates


def clip_cov_reference(logp, logp_old, adv, mask, c_low, c_high, ratio, lb, ub, seed):
    """Clip-Cov as the paper and the authors' code state it, one token at a time."""
    tokens = [(i, t) for i in range(logp.shape[0]) for t in range(logp.shape[1]) if mask[i, t]]
    n = len(tokens)
    lp = logp.detach()  # the selection reads numbers only
    mean_a = sum(float(adv[i, t]) for i, t in tokens) / n
    mean_lp = sum(float(lp[i, t]) for i, t in tokens) / n
    candidates = []
    for i, t in tokens:
        r, a = float(torch.exp(lp[i, t] - logp_old[i, t])), float(adv[i, t])
        clipped = (a > 0 and r > c_high) or (a < 0 and r < c_low)
        cov = (a - mean_a) * (float(lp[i, t]) - mean_lp)
        if not clipped and lb < cov < ub:
            candidates.append((i, t))
    count = min(max(int(ratio * n), 1), len(candidates))
    # "a random share": the same seeded permutation the method draws from
    perm = torch.randperm(len(candidates), generator=torch.Generator().manual_seed(seed))
    detached = {candidates[k] for k in perm[:count].tolist()}
    loss = 0.0
    for i, t in tokens:
        if (i, t) in detached:
            continue  # corr = 0: no value, no gradient
        r = torch.exp(logp[i, t] - logp_old[i, t])
        a = adv[i, t]
        loss = loss - torch.minimum(r * a, torch.clamp(r, c_low, c_high) * a)
    return loss / n, detached


@pytest.mark.parametrize("seed", range(8))
def test_equals_the_papers_objective(seed):
    g = torch.Generator().manual_seed(seed)
    b, t = 5, 6
    logp_old = -3 * torch.rand(b, t, generator=g, dtype=F64)
    logp = (logp_old + 0.5 * torch.randn(b, t, generator=g, dtype=F64)).requires_grad_()
    mask = torch.rand(b, t, generator=g) < 0.8
    mask[0, 0] = True
    adv = 2 * torch.randn(b, 1, generator=g, dtype=F64).expand(b, t)
    params = dict(c_low=0.8, c_high=1.2, ratio=0.1, lb=0.2, ub=3.0)  # candidates and clips occur
    out = policy_loss("clip_cov", logp, logp_old, adv, mask, seed=seed, **params)
    (grad,) = torch.autograd.grad(out.loss, logp)
    ref, detached = clip_cov_reference(logp, logp_old, adv, mask, seed=seed, **params)
    (ref_grad,) = torch.autograd.grad(ref, logp)
    assert {tuple(x) for x in (out.clip_state == 4).nonzero().tolist()} == detached
    assert detached  # at least one token is detached when any is a candidate
    torch.testing.assert_close(out.loss, ref, rtol=1e-10, atol=1e-13)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize(("params", "match"), [({"ratio": 0.0}, "^ratio must be"),
                                               ({"lb": 5.0}, "^lb must be < ub"),
                                               ({"c_low": 2.5}, "c_low: need 0 <= c_low < c_high")])
def test_bad_parameters_name_themselves(params, match):
    with pytest.raises(ValueError, match=match):
        build_method("clip_cov", params)

