"""dcpo by hand and against a literal transcription of the authors' code.

The reference below is transcribed from github.com/lime-RL/DCPO at
01787b0f61580961162faeb492defeb39f1eba53: verl/trainer/ppo/core_algos.py `get_clip_low_high`,
`compute_policy_loss_dcpo` (the branches of clip_type "dynamic", the one recipe/dcpo/run_dcpo.sh
runs) and `agg_loss` (token-mean, with the mini-batch's token count `batch_response_len`, and
only-token-mean, the script's), verl/utils/torch_functional.py `masked_sum` / `masked_mean`.
`config` is a stand-in dict with the fields the loss reads; the run's: clip_ratio_low 0.2,
clip_ratio_high 0.28, clip_ratio_c 10.
"""

from __future__ import annotations

import math

import pytest
import torch

from src.algorithms import CLIP_STATES, METHOD_DEFAULTS, build_method, policy_loss
from src.algorithms.methods.dcpo import dynamic_bounds

F64 = torch.float64


# ------------------------------------------------------------------------ the authors' code


def masked_sum(values, mask, axis=None):
    valid_values = torch.where(mask.bool(), values, 0.0)
    return (valid_values * mask).sum(axis=axis)


def masked_mean(values, mask, axis=None):
    s = masked_sum(values, mask, axis)
    return s / (mask.sum(axis=axis) + 1e-8)


def agg_loss(loss_mat, loss_mask, loss_agg_mode, batch_response_len=None, batch_size=None):
    if loss_agg_mode == "token-mean":
        if not batch_response_len:
            loss = masked_mean(loss_mat, loss_mask)
        else:
            loss = masked_sum(loss_mat, loss_mask).sum() / (batch_response_len + 1e-8)
    elif loss_agg_mode == "only-token-mean":
        loss = masked_mean(loss_mat, loss_mask).sum()
    else:
        raise ValueError(f"Invalid loss_agg_mode: {loss_agg_mode}")  # (other modes not used)
    return loss


def get_clip_low_high(ref_logprob, low_clip=0.1, high_clip=0.2, clip_ratio_c=float("inf")):
    ref_prob = torch.exp(ref_logprob)
    # new_prob = torch.exp(new_logprob)
    # ratio = torch.exp(new_logprob-ref_logprob)
    low_c_ref = torch.where(ref_prob != 0, 4 * low_clip / (ref_prob), 0)
    low_c_ref = 1 - low_c_ref
    low_c_ref = low_c_ref * (low_c_ref >= 0)
    high_c_ref = 4 * high_clip / ref_prob
    high_c_ref = torch.where(ref_prob != 0, 1 + 4 * high_clip / ref_prob, float("inf"))
    low = (1 + torch.sqrt(low_c_ref)) / 2
    high = (1 + torch.sqrt(high_c_ref)) / 2
    # 最小10
    clip_ratio_c = max(clip_ratio_c, 10)
    return low, torch.clamp(high, 0, clip_ratio_c)


class Config(dict):
    def __init__(self, clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=10.0,
                 clip_type="dynamic"):
        super().__init__(clip_type=clip_type, clip_ratio_c=clip_ratio_c)
        self.clip_ratio, self.clip_ratio_low, self.clip_ratio_high = clip_ratio, clip_ratio_low, clip_ratio_high


def compute_policy_loss_dcpo(old_log_prob, log_prob, advantages, response_mask,
                             loss_agg_mode="token-mean", config=None, batch_response_len=None,
                             batch_size=None):
    clip_type = config.get("clip_type", "origin")

    clip_ratio = config.clip_ratio  # Clipping parameter ε for standard PPO. See https://arxiv.org/abs/1707.06347.
    clip_ratio_low = config.clip_ratio_low if config.clip_ratio_low is not None else clip_ratio
    clip_ratio_high = config.clip_ratio_high if config.clip_ratio_high is not None else clip_ratio
    clip_ratio_c = config.get("clip_ratio_c", 3.0)  # Lower bound of the ratio for dual-clip PPO. See https://arxiv.org/pdf/1912.09729.

    negative_approx_kl = log_prob - old_log_prob
    # Clamp negative_approx_kl for stability
    # negative_approx_kl = torch.clamp(negative_approx_kl, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    ppo_kl = masked_mean(-negative_approx_kl, response_mask)
    pg_losses1 = -advantages * ratio

    cliprange = clip_ratio
    cliprange_low = clip_ratio_low
    cliprange_high = clip_ratio_high
    if cliprange_low is None:
        cliprange_low = cliprange
    if cliprange_high is None:
        cliprange_high = cliprange
    if clip_type == "dynamic":  # grpo
        cliprange_low, cliprange_high = get_clip_low_high(old_log_prob, cliprange_low, cliprange_high, clip_ratio_c)
        assert clip_ratio_c > 1.0, "The lower bound of the clip_ratio_c for dual-clip PPO should be greater than 1.0," + f" but get the value: {clip_ratio_c}."
    else:
        raise ValueError(clip_type)  # (the other clip types are not DCPO's run)

    pg_losses2 = -advantages * torch.clamp(ratio, cliprange_low, cliprange_high)  # - clip(ratio, 1-cliprange, 1+cliprange) * A
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)  # max(-ratio * A, -clip(ratio, 1-cliprange, 1+cliprange) * A)
    pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses1).float(), response_mask)

    pg_losses3 = -advantages * clip_ratio_c
    # dual clip or dynamic clip
    if clip_type in ["dynamic", "dual"]:

        clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
        pg_clipfrac_lower = masked_mean(torch.gt(clip_pg_losses1, pg_losses3) * (advantages < 0).float(), response_mask)

        pg_losses = torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1)
        pg_loss = agg_loss(loss_mat=pg_losses, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, batch_response_len=batch_response_len, batch_size=batch_size)

        return pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower


# --------------------------------------------------------------------------- by hand


def test_defaults():
    assert METHOD_DEFAULTS["dcpo"] == {"eps_low": 0.2, "eps_high": 0.28, "dual_clip_c": 10.0}


def names(state):
    return [[CLIP_STATES[s] for s in row] for row in state.tolist()]


def test_bounds_by_hand():
    # q = 1: c_low = (1 + sqrt(1 - 0.8)) / 2 = 0.7236, c_high = (1 + sqrt(1 + 1.12)) / 2 = 1.2280
    # q = 0.5: c_low = (1 + sqrt(1 - 1.6)) -> the floor: 0.5; c_high = (1 + sqrt(3.24)) / 2 = 1.4
    # q = 0.001: c_high = (1 + sqrt(1121)) / 2 = 17.24, capped at max(10, 10) = 10
    logq = torch.tensor([0.0, math.log(0.5), math.log(0.001)], dtype=F64)
    c_low, c_high = dynamic_bounds(logq, 0.2, 0.28, 10.0)
    torch.testing.assert_close(c_low, torch.tensor([(1 + math.sqrt(0.2)) / 2, 0.5, 0.5], dtype=F64),
                               rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(c_high, torch.tensor([(1 + math.sqrt(2.12)) / 2, 1.4, 10.0], dtype=F64),
                               rtol=1e-12, atol=1e-12)
    # the cap is max(dual_clip_c, 10): a dual clip at 20 lets it reach 17.24, one at 5 does
    # not lower it below 10
    _, c_high = dynamic_bounds(logq, 0.2, 0.28, 20.0)
    assert c_high[2].item() == pytest.approx((1 + math.sqrt(1121)) / 2, rel=1e-12)
    _, c_high = dynamic_bounds(logq, 0.2, 0.28, 5.0)
    assert c_high[2].item() == 10.0


def test_by_hand():
    # Row 0, A = +1: q = 1, r = 1.3 > 1.228: clip_high (J = 1.228, no gradient); q = 0.5,
    #   r = 1.3 < 1.4: kept (J = 1.3, grad 1.3) -- the rarer token may move further.
    # Row 1, A = -1: q = 0.9: c_low = (1 + sqrt(1 - 0.8 / 0.9)) / 2 = 0.6667; r = 0.6 < it:
    #   clip_low (J = -0.6667); q = 0.05, r = 12 > 10: dual (J = -10).
    # loss = -sum J / 4; only the kept token has a gradient.
    q = torch.tensor([[1.0, 0.5], [0.9, 0.05]], dtype=F64)
    r = torch.tensor([[1.3, 1.3], [0.6, 12.0]], dtype=F64)
    logp = (q.log() + r.log()).requires_grad_()
    out = policy_loss("dcpo", logp, q.log(), torch.tensor([1.0, -1.0], dtype=F64),
                      torch.ones(2, 2, dtype=torch.bool))
    out.loss.backward()
    hi = (1 + math.sqrt(1 + 1.12)) / 2
    lo = (1 + math.sqrt(1 - 0.8 / 0.9)) / 2
    assert out.loss.item() == pytest.approx(-(hi + 1.3 - lo - 10.0) / 4, rel=1e-12)
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, -1.3 / 4], [0.0, 0.0]], dtype=F64),
                               rtol=1e-12, atol=0)
    assert names(out.clip_state) == [["clip_high", "none"], ["clip_low", "dual"]]
    m = out.metrics
    assert (m["clip_frac_pos"], m["clip_frac_neg"]) == (0.5, 1.0)
    assert m["dcpo_c_high_pos"] == pytest.approx((hi + 1.4) / 2, rel=1e-12)
    assert m["dcpo_c_low_neg"] == pytest.approx((lo + 0.5) / 2, rel=1e-12)
    # the value reading: the clipped tokens' values are their own bounds times A
    assert m["contrib_value_pos"] == pytest.approx(hi + 1.3, rel=1e-12)
    assert (out.c_low, out.c_high) == (None, None)


def test_underflowing_probabilities_take_the_formulas_limit():
    # float32 q = exp(-95) underflows past 4 eps / q: the authors' c_low is NaN there (and 1
    # at q = 0); here it is 0.5, the limit of the formula as q falls
    logq = torch.tensor([-95.0, -120.0], dtype=torch.float32)
    theirs_low, theirs_high = get_clip_low_high(logq, 0.2, 0.28, 10.0)
    assert math.isnan(theirs_low[0].item()) and theirs_low[1].item() == 1.0
    c_low, c_high = dynamic_bounds(logq, 0.2, 0.28, 10.0)
    assert c_low.tolist() == [0.5, 0.5]
    assert c_high.tolist() == theirs_high.tolist() == [10.0, 10.0]


# -------------------------------------------------------- against the authors' code


def batch(seed, b=6, t=8, dtype=F64, full=False):
    """Right-padded responses, both advantage signs and one zero, behaviour probabilities
    from ~1e-4 to 1 (so the low floor, the high cap and the q-dependent bounds all occur),
    ratios past both bounds and past the dual clip."""
    g = torch.Generator().manual_seed(seed)
    old = -9.0 * torch.rand(b, t, generator=g, dtype=dtype) ** 2
    log_r = 0.6 * torch.randn(b, t, generator=g, dtype=dtype)
    lengths = torch.full((b,), t) if full else torch.randint(3, t + 1, (b,), generator=g)
    lengths[0] = t
    mask = (torch.arange(t)[None, :] < lengths[:, None]).to(dtype)
    adv = torch.randn(b, generator=g, dtype=dtype)
    adv[2] = 0.0
    adv[0], adv[1] = abs(adv[0]), -abs(adv[1])
    old[1, 0], log_r[1, 0] = -4.0, 2.5  # A < 0, r = 12.2 > 10: dual
    old[0, 0], log_r[0, 0] = -0.05, 0.4  # A > 0, q = 0.95, r = 1.49 > c_high ~1.23: clipped
    old[1, 1], log_r[1, 1] = -0.02, -0.6  # A < 0, q = 0.98, r = 0.55 < c_low ~0.71: clipped
    old[0, 1], log_r[0, 1] = -7.0, 3.0  # A > 0, q = 0.0009: c_high capped at 10, r = 20 above it
    return old, old + log_r, adv[:, None].expand(b, t).contiguous(), mask


def ours(old, logp, adv, mask, **params):
    theirs = logp.clone().requires_grad_()
    out = policy_loss("dcpo", theirs, old, adv, mask.bool(), **params)
    (grad,) = torch.autograd.grad(out.loss, theirs)
    return out, grad


@pytest.mark.parametrize("dual", [10.0, 5.0], ids=["script-c", "c-below-the-cap-floor"])
@pytest.mark.parametrize("agg", ["token-mean", "only-token-mean"])
@pytest.mark.parametrize("seed", range(4))
def test_equals_the_authors_code(seed, agg, dual):
    old, logp, adv, mask = batch(seed)
    theirs = logp.clone().requires_grad_()
    ref, ref_clipfrac, _, ref_lower = compute_policy_loss_dcpo(old, theirs, adv, mask, loss_agg_mode=agg,
                                                               config=Config(clip_ratio_c=dual))
    (ref_grad,) = torch.autograd.grad(ref, theirs)
    out, grad = ours(old, logp, adv, mask, dual_clip_c=dual)
    # masked_mean divides by N + 1e-8: 1e-8 / N relative
    torch.testing.assert_close(out.loss, ref, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-9, atol=1e-12)
    s = out.clip_state[mask.bool()]
    for state in ("none", "clip_low", "clip_high", "dual"):  # every branch
        assert bool((s == CLIP_STATES.index(state)).any()), state
    c_low, c_high = get_clip_low_high(old, 0.2, 0.28, 10.0)
    m = mask.bool()
    assert bool((c_low[m] == 0.5).any() and (c_low[m] > 0.5).any() and (c_high[m] == 10.0).any())
    # their pg_clipfrac: -A clip(r) > -A r, the clip_low and clip_high tokens; pg_clipfrac_lower: dual
    assert out.metrics["clip_low_frac"] + out.metrics["clip_high_frac"] == pytest.approx(
        float(ref_clipfrac), rel=1e-7)
    assert out.metrics["dual_clip_frac"] == pytest.approx(float(ref_lower), rel=1e-7)


def test_the_bounds_are_the_authors_to_the_last_bit():
    for dtype in (F64, torch.float32):
        old, *_ = batch(2, dtype=dtype)
        theirs = get_clip_low_high(old, 0.2, 0.28, 10.0)
        mine = dynamic_bounds(old, 0.2, 0.28, 10.0)
        assert torch.equal(mine[0], theirs[0]) and torch.equal(mine[1], theirs[1])


def test_micro_batches_equal_the_authors_mini_batch_token_mean():
    # The authors' loss_normal_type "mini_batch": each micro-batch's token sum over the
    # mini-batch's response tokens (batch_response_len); the trainer's: the same denominator.
    old, logp, adv, mask = batch(9, b=8)
    micro = [slice(0, 3), slice(3, 5), slice(5, 8)]
    n = float(mask.sum())
    theirs = logp.clone().requires_grad_()
    ref = sum(compute_policy_loss_dcpo(old[s], theirs[s], adv[s], mask[s], config=Config(),
                                       batch_response_len=n)[0] for s in micro)
    (ref_grad,) = torch.autograd.grad(ref, theirs)
    method = build_method("dcpo")
    den = method.denominator(mask.bool(), None)
    mine = logp.clone().requires_grad_()
    total = sum(method.loss(mine[s], old[s], adv[s], mask[s].bool(), denominator=den).loss for s in micro)
    (grad,) = torch.autograd.grad(total, mine)
    torch.testing.assert_close(total, ref, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-9, atol=1e-12)


def test_float32_log_probs_agree_with_the_authors_code():
    old, logp, adv, mask = batch(7, dtype=torch.float32)
    theirs = logp.clone().requires_grad_()
    ref, *_ = compute_policy_loss_dcpo(old, theirs, adv, mask, config=Config())
    (ref_grad,) = torch.autograd.grad(ref, theirs)
    out, grad = ours(old, logp, adv, mask)
    torch.testing.assert_close(out.loss, ref, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(("params", "match"), [
    ({"eps_low": 0.0}, "^eps_low must be a finite number > 0"),
    ({"eps_high": -0.28}, "^eps_high must be a finite number > 0"),
    ({"dual_clip_c": 1.0}, "^dual_clip_c must be > 1"),
])
def test_bad_parameters_name_themselves(params, match):
    with pytest.raises(ValueError, match=match):
        build_method("dcpo", params)
