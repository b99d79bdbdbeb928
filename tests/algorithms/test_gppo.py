"""gppo and ce_gppo by hand and against literal transcriptions of the authors' code.

The references below are transcribed from github.com/Kwai-Klear/KlearReasoner at
3422f6d36a8251cb1c86a7b943c7c815850864fd:
- `compute_gppo_loss` as README.md prints it ("The complete loss implementation"; the copy in
  verl/trainer/ppo/core_algos.py adds an `only_high` switch whose test reads an undefined
  name, `only_higher`, so it raises NameError as committed; its other branch is the README's);
- verl/trainer/ppo/core_algos.py `compute_gppo_loss_general_beta` and `agg_loss`,
  verl/utils/torch_functional.py `masked_mean`;
- verl/workers/actor/dp_actor.py `update_policy`: each micro-batch's loss divided by the
  gradient-accumulation steps (the positive-response NLL term, positive_loss_coeff, is not
  part of GPPO and is left out).
Metrics the functions return beside the loss are kept where the tests read them.
"""

from __future__ import annotations

import pytest
import torch

from src.algorithms import CLIP_STATES, METHOD_DEFAULTS, build_method, policy_loss
from src.integrations._common import load_method_yaml

F64 = torch.float64


# ------------------------------------------------------------------------ the authors' code


def masked_mean(values, mask, axis=None):
    """Compute mean of tensor with a masked values."""
    return (values * mask).sum(axis=axis) / (mask.sum(axis=axis) + 1e-8)


def agg_loss(loss_mat, loss_mask, loss_agg_mode):
    if loss_agg_mode == "token-mean":
        loss = masked_mean(loss_mat, loss_mask)
    else:
        raise ValueError(f"Invalid loss_agg_mode: {loss_agg_mode}")  # (other modes not used)
    return loss


def compute_gppo_loss(old_log_prob, log_prob, advantages, response_mask, cliprange=None,
                      cliprange_low=None, cliprange_high=None, clip_ratio_c=3.0,
                      loss_agg_mode="token-mean"):
    assert clip_ratio_c > 1.0, (
        "The lower bound of the clip_ratio_c for dual-clip PPO should be greater than 1.0,"
        + f" but get the value: {clip_ratio_c}."
    )

    negative_approx_kl = log_prob - old_log_prob
    ratio = torch.exp(negative_approx_kl)
    ppo_kl = masked_mean(-negative_approx_kl, response_mask)

    pg_losses1 = -advantages * ratio
    if cliprange_low is None:
        cliprange_low = cliprange
    if cliprange_high is None:
        cliprange_high = cliprange
    pg_losses2 = -advantages * torch.clamp(
        ratio, (1 - cliprange_low) / ratio.detach() * ratio, (1 + cliprange_high) / ratio.detach() * ratio
    )
    clip_pg_losses1 = torch.maximum(
        pg_losses1, pg_losses2
    )
    pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses1).float(), response_mask)

    pg_losses3 = -advantages * clip_ratio_c

    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    pg_clipfrac_lower = masked_mean(
        torch.gt(clip_pg_losses1, pg_losses3) * (advantages < 0).float(), response_mask
    )

    pg_losses = torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1)
    pg_loss = agg_loss(loss_mat=pg_losses, loss_mask=response_mask, loss_agg_mode=loss_agg_mode)

    return pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower


def compute_gppo_loss_general_beta(old_log_prob, log_prob, advantages, response_mask, cliprange=None,
                                   cliprange_low=None, cliprange_high=None, clip_ratio_c=3.0,
                                   loss_agg_mode="token-mean", gppo_loss_beta1=0.25,
                                   gppo_loss_beta2=1.0):
    assert clip_ratio_c > 1.0, (
        "The lower bound of the clip_ratio_c for dual-clip PPO should be greater than 1.0,"
        + f" but get the value: {clip_ratio_c}."
    )

    negative_approx_kl = log_prob - old_log_prob
    ratio = torch.exp(negative_approx_kl)
    ppo_kl = masked_mean(-negative_approx_kl, response_mask)
    ratio_detached = ratio.detach()

    pg_losses1 = -advantages * ratio  # noqa: F841 (unused, as in the original)
    if cliprange_low is None:
        cliprange_low = cliprange
    if cliprange_high is None:
        cliprange_high = cliprange

    # case masks
    low_mask = (ratio < (1 - cliprange_low)) & (advantages < 0)
    high_mask = (ratio > (1 + cliprange_high)) & (advantages > 0)
    other_mask = ~(low_mask | high_mask)

    beta1 = gppo_loss_beta1
    beta2 = gppo_loss_beta2

    # three cases
    clip_pg_losses1 = torch.zeros_like(advantages)
    clip_pg_losses1[low_mask] = -beta1 * (1 - cliprange_low) / ratio_detached[low_mask] * ratio[low_mask] * advantages[low_mask]
    clip_pg_losses1[high_mask] = -beta2 * (1 + cliprange_high) / ratio_detached[high_mask] * ratio[high_mask] * advantages[high_mask]
    clip_pg_losses1[other_mask] = -ratio[other_mask] * advantages[other_mask]

    pg_clipfrac = masked_mean((low_mask | high_mask).float(), response_mask)

    pg_losses3 = -advantages * clip_ratio_c

    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    pg_clipfrac_lower = masked_mean(
        torch.gt(clip_pg_losses1, pg_losses3) * (advantages < 0).float(), response_mask
    )

    pg_losses = torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1)
    pg_loss = agg_loss(loss_mat=pg_losses, loss_mask=response_mask, loss_agg_mode=loss_agg_mode)

    return pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower


# the math script's actor settings: clip_ratio_low 0.2, clip_ratio_high 0.28, clip_ratio_c 10
SCRIPT = {"cliprange": 0.2, "cliprange_low": 0.2, "cliprange_high": 0.28, "clip_ratio_c": 10.0}


def authors_update(old, logp, adv, mask, micro_batches, gradient_accumulation, beta1=None, beta2=None):
    """dp_actor.update_policy's accumulated loss over one mini-batch (use_dynamic_bsz off):
    loss_func 'gppo' (betas None) or 'gppo_general'."""
    total = 0.0
    for rows in micro_batches:
        if beta1 is None:
            pg_loss, *_ = compute_gppo_loss(old[rows], logp[rows], adv[rows], mask[rows], **SCRIPT,
                                            loss_agg_mode="token-mean")
        else:
            pg_loss, *_ = compute_gppo_loss_general_beta(
                old[rows], logp[rows], adv[rows], mask[rows], **SCRIPT, loss_agg_mode="token-mean",
                gppo_loss_beta1=beta1, gppo_loss_beta2=beta2)
        total = total + pg_loss / gradient_accumulation
    return total


# --------------------------------------------------------------------------- by hand


def test_defaults_and_the_ce_gppo_variant():
    assert METHOD_DEFAULTS["gppo"] == {"c_low": 0.8, "c_high": 1.28, "dual_clip_c": 10.0,
                                       "beta1": 1.0, "beta2": 1.0}
    assert load_method_yaml("ce_gppo")["gppo"] == {"c_low": 0.8, "c_high": 1.28, "dual_clip_c": 10.0,
                                                   "beta1": 0.25, "beta2": 1.0}


def names(state):
    return [[CLIP_STATES[s] for s in row] for row in state.tolist()]


def run(r, adv, **params):
    r = torch.tensor(r, dtype=F64)
    logp = r.log().requires_grad_()
    out = policy_loss("gppo", logp, torch.zeros_like(r), torch.tensor(adv, dtype=F64),
                      torch.ones_like(r, dtype=torch.bool), **params)
    out.loss.backward()
    return out, logp.grad


def test_by_hand():
    # Row 0, A = +1: r = [1.0, 1.5, 0.5]: none (J 1.0, grad 1.0), preserved_high (J = 1.28,
    #   grad 1.28: the bound, not 0), none (A > 0 below c_low keeps r A: J 0.5, grad 0.5).
    # Row 1, A = -2: r = [0.5, 1.5, 12]: preserved_low (J = -1.6, grad 0.8 * -2 = -1.6),
    #   none (A < 0 above c_high keeps r A: J -3, grad -3), dual (r > 10: J = -20, grad 0).
    # loss = -sum J / 6; grad = -dJ/dlogp / 6.
    out, grad = run([[1.0, 1.5, 0.5], [0.5, 1.5, 12.0]], [1.0, -2.0])
    j = 1.0 + 1.28 + 0.5 - 1.6 - 3.0 - 20.0
    assert out.loss.item() == pytest.approx(-j / 6, rel=1e-12)
    torch.testing.assert_close(grad, -torch.tensor([[1.0, 1.28, 0.5], [-1.6, -3.0, 0.0]], dtype=F64) / 6,
                               rtol=1e-12, atol=0)
    assert names(out.clip_state) == [["none", "preserved_high", "none"],
                                     ["preserved_low", "none", "dual"]]
    m = out.metrics
    assert m["clip_frac"] == pytest.approx(1 / 6)  # only the dual clip removes a gradient
    assert m["preserved_low_frac"] == pytest.approx(1 / 6) and m["preserved_high_frac"] == pytest.approx(1 / 6)
    assert (out.c_low, out.c_high) == (0.8, 1.28)


def test_ce_gppo_betas_scale_the_kept_gradient_and_value():
    # beta1 = 0.25: the r = 0.5, A = -2 token: J = 0.25 * 0.8 * -2 = -0.4, grad -0.4
    out, grad = run([[0.5, 1.0]], [-2.0], beta1=0.25)
    assert out.loss.item() == pytest.approx(-(-0.4 - 2.0) / 2, rel=1e-12)
    torch.testing.assert_close(grad, torch.tensor([[0.4 / 2, 2.0 / 2]], dtype=F64), rtol=1e-12, atol=0)
    # beta = 0: no gradient past the bounds, as under ppo's clip
    out, grad = run([[0.5, 1.5]], [-1.0], beta1=0.0)
    assert grad[0, 0].item() == 0.0 and grad[0, 1].item() != 0.0


# -------------------------------------------------------- against the authors' code


def batch(seed, b=6, t=7, dtype=F64, full=False):
    """Right-padded responses (finite junk in the padding), both advantage signs and one
    zero, ratios past both bounds and past the dual clip."""
    g = torch.Generator().manual_seed(seed)
    old = -3.0 * torch.rand(b, t, generator=g, dtype=dtype)
    log_r = 0.5 * torch.randn(b, t, generator=g, dtype=dtype)
    lengths = torch.full((b,), t) if full else torch.randint(3, t + 1, (b,), generator=g)
    lengths[0] = t
    mask = (torch.arange(t)[None, :] < lengths[:, None]).to(dtype)
    adv = torch.randn(b, generator=g, dtype=dtype)
    adv[2] = 0.0
    adv[0], adv[1] = abs(adv[0]), -abs(adv[1])
    log_r[1, 0] = 2.6  # A < 0, r = 13.5 > 10: dual
    return old, old + log_r, adv[:, None].expand(b, t).contiguous(), mask


def ours(old, logp, adv, mask, **params):
    theirs = logp.clone().requires_grad_()
    out = policy_loss("gppo", theirs, old, adv, mask.bool(), **params)
    (grad,) = torch.autograd.grad(out.loss, theirs)
    return out, grad


@pytest.mark.parametrize("seed", range(4))
def test_equals_compute_gppo_loss(seed):
    old, logp, adv, mask = batch(seed)
    theirs = logp.clone().requires_grad_()
    ref, ref_clipfrac, _, ref_lower = compute_gppo_loss(old, theirs, adv, mask, **SCRIPT)
    (ref_grad,) = torch.autograd.grad(ref, theirs)
    out, grad = ours(old, logp, adv, mask)
    # masked_mean divides by N + 1e-8: 1e-8 / N relative
    torch.testing.assert_close(out.loss, ref, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-9, atol=1e-12)
    s = out.clip_state[mask.bool()]
    for state in ("none", "preserved_low", "preserved_high", "dual"):  # every branch
        assert bool((s == CLIP_STATES.index(state)).any()), state
    # their pg_clipfrac counts the tokens where -A clip(r) > -A r (A > 0 above c_high, A < 0
    # below c_low: the preserved ones), their pg_clipfrac_lower the dual ones
    m = out.metrics
    assert m["preserved_low_frac"] + m["preserved_high_frac"] == pytest.approx(float(ref_clipfrac), rel=1e-7)
    assert m["dual_clip_frac"] == pytest.approx(float(ref_lower), rel=1e-7)


@pytest.mark.parametrize(("beta1", "beta2"), [(0.25, 1.0), (1.0, 1.0), (0.5, 0.3), (0.0, 0.0)])
@pytest.mark.parametrize("seed", range(3))
def test_equals_compute_gppo_loss_general_beta(seed, beta1, beta2):
    old, logp, adv, mask = batch(seed)
    theirs = logp.clone().requires_grad_()
    ref, ref_clipfrac, _, _ = compute_gppo_loss_general_beta(
        old, theirs, adv, mask, **SCRIPT, gppo_loss_beta1=beta1, gppo_loss_beta2=beta2)
    (ref_grad,) = torch.autograd.grad(ref, theirs)
    out, grad = ours(old, logp, adv, mask, beta1=beta1, beta2=beta2)
    torch.testing.assert_close(out.loss, ref, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-9, atol=1e-12)
    m = out.metrics
    assert m["preserved_low_frac"] + m["preserved_high_frac"] == pytest.approx(float(ref_clipfrac), rel=1e-7)


@pytest.mark.parametrize("label", ["gppo", "ce_gppo"])
def test_micro_batches_equal_the_authors_accumulation(label):
    # dp_actor: each micro-batch's token mean / gradient_accumulation; that is the mini-batch's
    # token mean when the micro-batches hold as many tokens (full-length responses here). The
    # trainer divides each micro-batch by the whole mini-batch's token count.
    old, logp, adv, mask = batch(5, b=6, full=True)
    micro = [slice(0, 2), slice(2, 4), slice(4, 6)]
    params = load_method_yaml(label)["gppo"]
    betas = {} if label == "gppo" else {"beta1": params["beta1"], "beta2": params["beta2"]}
    theirs = logp.clone().requires_grad_()
    ref = authors_update(old, theirs, adv, mask, micro, 3, **betas)
    (ref_grad,) = torch.autograd.grad(ref, theirs)
    method = build_method("gppo", params)
    den = method.denominator(mask.bool(), None)
    mine = logp.clone().requires_grad_()
    total = sum(method.loss(mine[s], old[s], adv[s], mask[s].bool(), denominator=den).loss for s in micro)
    (grad,) = torch.autograd.grad(total, mine)
    torch.testing.assert_close(total, ref, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-9, atol=1e-12)
    whole = method.loss(logp, old, adv, mask.bool()).loss  # and unsplit, the same
    torch.testing.assert_close(whole, total.detach(), rtol=1e-12, atol=1e-15)


def test_float32_log_probs_agree_with_the_authors_code():
    old, logp, adv, mask = batch(7, dtype=torch.float32)
    theirs = logp.clone().requires_grad_()
    ref, *_ = compute_gppo_loss(old, theirs, adv, mask, **SCRIPT)
    (ref_grad,) = torch.autograd.grad(ref, theirs)
    out, grad = ours(old, logp, adv, mask)
    torch.testing.assert_close(out.loss, ref, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(("params", "match"), [
    ({"beta1": -0.25}, "^beta1 must be a finite number >= 0"),
    ({"beta2": -1.0}, "^beta2 must be a finite number >= 0"),
    ({"c_low": 1.3, "c_high": 1.28}, "^c_low: need 0 <= c_low < c_high"),
    ({"dual_clip_c": 1.0}, "^dual_clip_c must be > 1"),
])
def test_bad_parameters_name_themselves(params, match):
    with pytest.raises(ValueError, match=match):
        build_method("gppo", params)
