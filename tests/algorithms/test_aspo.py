"""aspo by hand and against a literal transcription of the authors' code.

The reference below is transcribed from github.com/wizard-III/Archer2.0 at
b08d963d5d65909ef1f24dba2f382006d0be33e1: verl/trainer/ppo/core_algos.py
`compute_policy_loss_archer` and `agg_loss` (token-mean), verl/utils/torch_functional.py
`masked_mean`, and verl/workers/actor/dp_actor.py `update_policy`: the entropy mask it builds
per micro-batch and the literals it passes (use_archer_policy_loss, as
scripts/train/run_archer2.0_qwen2.5_1.5b_math.sh sets it; use_dynamic_clip is passed but
unused). The response mask is boolean here (its `&` with boolean masks needs that).
"""

from __future__ import annotations

import math

import pytest
import torch

from src.algorithms import CLIP_STATES, METHOD_DEFAULTS, build_method, policy_loss

F64 = torch.float64


# ------------------------------------------------------------------------ the authors' code


def masked_mean(values, mask, axis=None):
    return (values * mask).sum(axis=axis) / (mask.sum(axis=axis) + 1e-8)


def agg_loss(loss_mat, loss_mask, loss_agg_mode):
    if loss_agg_mode == "token-mean":
        loss = masked_mean(loss_mat, loss_mask)
    else:
        raise ValueError(f"Invalid loss_agg_mode: {loss_agg_mode}")  # (other modes not used)
    return loss


def compute_policy_loss_archer(
    old_log_prob,
    log_prob,
    advantages,
    response_mask,
    high_entropy_mask,
    negative_low_entropy_clip_ratio_low=0.2,
    negative_high_entropy_clip_ratio_low=0.4,
    positive_low_entropy_clip_ratio_high=0.2,
    positive_high_entropy_clip_ratio_high=0.4,
    negative_clip_ratio_c=3.0,
    positive_clip_ratio_c=3.0,
    use_dynamic_clip=False,
    loss_agg_mode: str = "token-mean",
):
    assert negative_clip_ratio_c > 1.0, "The negative_clip_ratio_c should be greater than 1.0," + f" but get the value: {negative_clip_ratio_c}."
    assert positive_clip_ratio_c > 1.0, "The positive_clip_ratio_c should be greater than 1.0," + f" but get the value: {positive_clip_ratio_c}."

    ratio = torch.exp(torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0))

    negative_clip_ratio = torch.where(high_entropy_mask, torch.clamp(ratio, min=1-negative_low_entropy_clip_ratio_low, max=None), torch.clamp(ratio, min=1-negative_high_entropy_clip_ratio_low, max=None))
    positive_clip_ratio = torch.where(high_entropy_mask, torch.clamp(ratio, min=None, max=1+positive_low_entropy_clip_ratio_high), torch.clamp(ratio, min=None, max=1+positive_high_entropy_clip_ratio_high))

    clip_ratio = torch.where(advantages < 0, negative_clip_ratio, positive_clip_ratio)

    pg_clipfrac_upper = masked_mean(torch.gt(ratio, clip_ratio).float(), response_mask)
    pg_clipfrac_lower = masked_mean(torch.lt(ratio, clip_ratio).float(), response_mask)

    negative_pg_losses_clip = -advantages * negative_clip_ratio
    positive_pg_losses_clip = -advantages * (positive_clip_ratio / positive_clip_ratio.detach()) / positive_clip_ratio.detach()

    negative_dual_clip_ratio = torch.clamp(negative_clip_ratio, min=None, max=negative_clip_ratio_c)
    negative_clipped_mask = torch.gt(negative_clip_ratio, negative_dual_clip_ratio)
    negative_pg_clipfrac_dual = masked_mean(negative_clipped_mask.float(), response_mask & (advantages < 0))
    negative_pg_losses_dual = -advantages * negative_dual_clip_ratio.detach() * log_prob
    negative_pg_losses = torch.where(negative_clipped_mask, negative_pg_losses_dual, negative_pg_losses_clip)

    positive_dual_clip_ratio = torch.clamp(1/positive_clip_ratio, min=None, max=positive_clip_ratio_c)
    positive_clipped_mask = torch.gt(1/positive_clip_ratio, positive_dual_clip_ratio)
    positive_pg_clipfrac_dual = masked_mean(positive_clipped_mask.float(), response_mask & (advantages > 0))
    positive_pg_losses_dual = -advantages * positive_dual_clip_ratio.detach() * log_prob
    positive_pg_losses = torch.where(positive_clipped_mask, positive_pg_losses_dual, positive_pg_losses_clip)

    pg_losses = torch.where(advantages < 0, negative_pg_losses, positive_pg_losses)
    pg_loss = agg_loss(loss_mat=pg_losses, loss_mask=response_mask, loss_agg_mode=loss_agg_mode)

    return pg_loss, pg_clipfrac_upper, pg_clipfrac_lower, negative_pg_clipfrac_dual, positive_pg_clipfrac_dual


def dp_actor_loss(old_log_prob, log_prob, advantages, response_mask, entropy, config=None):
    """dp_actor.update_policy for one micro-batch: the entropy mask, then the Archer loss
    with the literals it passes."""
    config = config or {}
    # high entropy token mask
    with torch.no_grad():
        token_entropy_quantile = config.get("token_entropy_quantile", 0.8)
        masked_entropy = torch.where(response_mask.bool(), entropy.detach(), torch.nan)  # (bsz, response_length)
        q80 = torch.nanquantile(masked_entropy, q=token_entropy_quantile, dim=-1, keepdim=True)  # (bsz, 1)
        high_entropy_mask = (masked_entropy <= q80) & response_mask # only low entropy token is True
        low_entropy_mask = (masked_entropy > q80) & response_mask #  only high entropy token is True  # noqa: F841

    return compute_policy_loss_archer(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=response_mask,
        high_entropy_mask=high_entropy_mask,
        negative_low_entropy_clip_ratio_low=0.2,
        negative_high_entropy_clip_ratio_low=0.4,
        positive_low_entropy_clip_ratio_high=0.2,
        positive_high_entropy_clip_ratio_high=0.4,
        negative_clip_ratio_c=3.0,
        positive_clip_ratio_c=3.0,
        use_dynamic_clip=config.get("use_dynamic_clip", False),
    )


# --------------------------------------------------------------------------- by hand


def test_defaults():
    assert METHOD_DEFAULTS["aspo"] == {"c_low": 0.8, "c_high": 1.2, "c_low_high_entropy": 0.6,
                                       "c_high_high_entropy": 1.4, "dual_clip_neg": 3.0,
                                       "dual_clip_pos": 3.0, "entropy_quantile": 0.8}


def names(state):
    return [[CLIP_STATES[s] for s in row] for row in state.tolist()]


def test_by_hand():
    # One response of 5 tokens, entropies [0.1, 0.2, 0.3, 0.4, 2.0]: the 0.8-quantile is
    # 0.4 + 0.2 (2.0 - 0.4) = 0.72 (linear), so only the last token is high-entropy.
    # Row 0, A = +1, r = [0.5, 1.0, 1.3, 0.2, 1.3]:
    #   r = 0.5: kept, J = A / r = 2, dJ/dlogp = A / r = 2 (the flipped weight)
    #   r = 1.0: J = 1, grad 1
    #   r = 1.3 > 1.2: clip_high, J = 1 / 1.2, no gradient
    #   r = 0.2: 1/r = 5 > 3: dual_capped, J = 3 log p, dJ/dlogp = 3
    #   r = 1.3 on the high-entropy token: 1.3 <= 1.4, kept: J = 1/1.3, grad 1/1.3
    # logp_b = 0 except token 3 (logp_b = -1, so log p = log 0.2 - 1).
    ent = torch.tensor([[0.1, 0.2, 0.3, 0.4, 2.0]], dtype=F64)
    r = torch.tensor([[0.5, 1.0, 1.3, 0.2, 1.3]], dtype=F64)
    lb = torch.tensor([[0.0, 0.0, 0.0, -1.0, 0.0]], dtype=F64)
    logp = (lb + r.log()).requires_grad_()
    out = policy_loss("aspo", logp, lb, torch.tensor([1.0], dtype=F64),
                      torch.ones(1, 5, dtype=torch.bool), entropy=ent)
    out.loss.backward()
    logp3 = math.log(0.2) - 1.0
    j = 2.0 + 1.0 + 1 / 1.2 + 3 * logp3 + 1 / 1.3
    assert out.loss.item() == pytest.approx(-j / 5, rel=1e-12)
    torch.testing.assert_close(logp.grad, -torch.tensor([[2.0, 1.0, 0.0, 3.0, 1 / 1.3]], dtype=F64) / 5,
                               rtol=1e-12, atol=0)
    assert names(out.clip_state) == [["none", "none", "clip_high", "dual_capped", "none"]]
    m = out.metrics
    assert m["aspo_high_entropy_frac"] == pytest.approx(0.2)
    assert m["clip_frac"] == pytest.approx(0.2) and m["dual_capped_frac"] == pytest.approx(0.2)
    # gradient reading: |w A| over the tokens that keep a gradient: 2 + 1 + 3 + 1/1.3
    assert m["contrib_grad_pos"] == pytest.approx(2 + 1 + 3 + 1 / 1.3, rel=1e-12)
    assert (out.c_low, out.c_high) == (None, None)


def test_negative_tokens_by_hand():
    # A = -1, one response, equal entropies (no token above the 0.8-quantile): bounds 0.8 / 1.2.
    # r = [0.7, 1.5, 4.0]: clip_low (J = -0.8), kept above c_high (J = -1.5, grad -1.5: no
    # upper clip for A < 0), r > 3: dual_capped (J = -3 log p, grad -3).
    r = torch.tensor([[0.7, 1.5, 4.0]], dtype=F64)
    lb = torch.full_like(r, -2.0)
    logp = (lb + r.log()).requires_grad_()
    out = policy_loss("aspo", logp, lb, torch.tensor([-1.0], dtype=F64), torch.ones(1, 3, dtype=torch.bool),
                      entropy=torch.ones_like(r))
    out.loss.backward()
    assert names(out.clip_state) == [["clip_low", "none", "dual_capped"]]
    j = -0.8 - 1.5 - 3 * (math.log(4.0) - 2.0)
    assert out.loss.item() == pytest.approx(-j / 3, rel=1e-12)
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, 1.5, 3.0]], dtype=F64) / 3, rtol=1e-12, atol=0)
    assert out.metrics["aspo_high_entropy_frac"] == 0.0


def test_loss_needs_the_decision():
    method = build_method("aspo")
    x = torch.zeros(1, 2, dtype=F64)
    with pytest.raises(ValueError, match="call decide"):
        method.loss(x, x, torch.ones(1, dtype=F64), torch.ones(1, 2, dtype=torch.bool))


def test_needs_entropy():
    x = torch.zeros(1, 2, dtype=F64)
    with pytest.raises(ValueError, match="aspo needs entropy="):
        policy_loss("aspo", x, x, torch.ones(1, dtype=F64), torch.ones(1, 2, dtype=torch.bool))


# -------------------------------------------------------- against the authors' code


def batch(seed, b=6, t=9, dtype=F64, full=False):
    """Right-padded responses, both advantage signs and one zero, entropies per token,
    ratios past every bound on both entropy groups and past both dual clips."""
    g = torch.Generator().manual_seed(seed)
    old = -3.0 * torch.rand(b, t, generator=g, dtype=dtype)
    log_r = 0.45 * torch.randn(b, t, generator=g, dtype=dtype)
    lengths = torch.full((b,), t) if full else torch.randint(4, t + 1, (b,), generator=g)
    lengths[0] = lengths[1] = t
    mask = torch.arange(t)[None, :] < lengths[:, None]
    adv = torch.randn(b, generator=g, dtype=dtype)
    adv[2] = 0.0
    adv[0], adv[1] = abs(adv[0]), -abs(adv[1])
    entropy = 3.0 * torch.rand(b, t, generator=g, dtype=dtype)
    log_r[0, 0], log_r[1, 0] = -1.5, 1.4  # the dual clips: A > 0, r = 0.22; A < 0, r = 4.1
    entropy[0, 1], log_r[0, 1] = 5.0, 0.3  # A > 0, high entropy, r = 1.35: kept (<= 1.4)
    entropy[0, 2], log_r[0, 2] = 0.0, 0.3  # A > 0, low entropy, r = 1.35: clipped (> 1.2)
    entropy[1, 1], log_r[1, 1] = 5.0, -0.4  # A < 0, high entropy, r = 0.67: kept (>= 0.6)
    entropy[1, 2], log_r[1, 2] = 0.0, -0.4  # A < 0, low entropy, r = 0.67: clipped (< 0.8)
    return old, old + log_r, adv[:, None].expand(b, t).contiguous(), mask, entropy


def ours(old, logp, adv, mask, entropy, **params):
    theirs = logp.clone().requires_grad_()
    out = policy_loss("aspo", theirs, old, adv, mask, entropy=entropy, **params)
    (grad,) = torch.autograd.grad(out.loss, theirs)
    return out, grad


@pytest.mark.parametrize("seed", range(5))
def test_equals_the_authors_code(seed):
    old, logp, adv, mask, entropy = batch(seed)
    theirs = logp.clone().requires_grad_()
    ref, _, _, neg_dual, pos_dual = dp_actor_loss(old, theirs, adv, mask, entropy)
    (ref_grad,) = torch.autograd.grad(ref, theirs)
    out, grad = ours(old, logp, adv, mask, entropy)
    # masked_mean divides by N + 1e-8: 1e-8 / N relative
    torch.testing.assert_close(out.loss, ref, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-9, atol=1e-12)
    s = out.clip_state
    for state in ("none", "clip_low", "clip_high", "dual_capped"):  # every branch
        assert bool((s[mask] == CLIP_STATES.index(state)).any()), state
    dual = s == CLIP_STATES.index("dual_capped")
    assert float((dual & (adv > 0)).sum() / (mask & (adv > 0)).sum()) == pytest.approx(float(pos_dual), rel=1e-7)
    assert float((dual & (adv < 0)).sum() / (mask & (adv < 0)).sum()) == pytest.approx(float(neg_dual), rel=1e-7)
    # the decision is the authors' mask, negated (their `high_entropy_mask` holds the others)
    masked_entropy = torch.where(mask, entropy, torch.nan)
    q80 = torch.nanquantile(masked_entropy, q=0.8, dim=-1, keepdim=True)
    method = build_method("aspo")
    decision = method.decide(method.decision_inputs(logp, old, adv, mask, entropy))
    assert torch.equal(decision.tokens, (masked_entropy > q80) & mask)


@pytest.mark.parametrize("seed", range(2))
def test_micro_batches_equal_the_authors_accumulation(seed):
    # dp_actor: each micro-batch's token mean / gradient_accumulation, its entropy mask per
    # response; with micro-batches of equal token counts (full-length responses) that is the
    # mini-batch's token mean. The trainer: one decision on the whole mini-batch (rows are
    # responses, so the same mask), each micro-batch divided by the mini-batch's token count.
    old, logp, adv, mask, entropy = batch(seed, b=6, full=True)
    micro = [slice(0, 2), slice(2, 4), slice(4, 6)]
    theirs = logp.clone().requires_grad_()
    ref = sum(dp_actor_loss(old[s], theirs[s], adv[s], mask[s], entropy[s])[0] / 3 for s in micro)
    (ref_grad,) = torch.autograd.grad(ref, theirs)
    method = build_method("aspo")
    decision = method.decide(method.decision_inputs(logp, old, adv, mask, entropy))
    den = method.denominator(mask, decision)
    mine = logp.clone().requires_grad_()
    total = sum(method.loss(mine[s], old[s], adv[s], mask[s], decision.take(s, 9), denominator=den).loss
                for s in micro)
    (grad,) = torch.autograd.grad(total, mine)
    torch.testing.assert_close(total, ref, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-9, atol=1e-12)


def test_float32_agrees_with_the_authors_code():
    old, logp, adv, mask, entropy = batch(4, dtype=torch.float32)
    theirs = logp.clone().requires_grad_()
    ref, *_ = dp_actor_loss(old, theirs, adv, mask, entropy)
    (ref_grad,) = torch.autograd.grad(ref, theirs)
    out, grad = ours(old, logp, adv, mask, entropy)
    torch.testing.assert_close(out.loss, ref, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(("params", "match"), [
    ({"c_low": 1.3}, "^c_low: need 0 <= c_low < c_high"),
    ({"c_low_high_entropy": 1.5}, "^c_low_high_entropy: need 0 <= c_low < c_high"),
    ({"dual_clip_neg": 1.0}, "^dual_clip_neg must be > 1"),
    ({"dual_clip_pos": 0.5}, "^dual_clip_pos must be > 1"),
    ({"entropy_quantile": 0.0}, "^entropy_quantile must be in"),
])
def test_bad_parameters_name_themselves(params, match):
    with pytest.raises(ValueError, match=match):
        build_method("aspo", params)
