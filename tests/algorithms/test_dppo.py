"""dppo_tv and dppo_kl by hand and against literal transcriptions of the authors' code.

The references below are transcribed from
- the authors' PR to verl, github.com/verl-project/verl at
  182383bbb58035a5587db6835872977e26441dcd: verl/trainer/ppo/core_algos.py
  `compute_policy_loss_dppo_tv`, `compute_policy_loss_dppo_kl` and `agg_loss` (token-mean),
  verl/utils/torch_functional.py `masked_sum` / `masked_mean` (the config's type asserts and
  the returned metrics are left out; `config` is a stand-in with the fields they read);
- sail-sg/Stable-RL at c6af1d119c0fe30d16dd9a837d35fdf695acd226: verl/trainer/ppo/core_algos.py
  `_compute_token_mask_for_policy_loss` (the dppo_binary_tv / dppo_binary_kl branches) and
  `compute_policy_loss_with_mask` (its loss; metrics left out), with the rollout log-probs
  equal to the behaviour log-probs (bypass mode, as the project's ratio is taken).
The authors' run script sets clip_ratio_c=10000; the tests also run a cap that binds.
"""

from __future__ import annotations

import math

import pytest
import torch

from src.algorithms import CLIP_STATES, METHOD_DEFAULTS, build_method, policy_loss

F64 = torch.float64


# ---------------------------------------------------------------- the authors' verl PR


def masked_sum(values, mask, axis=None):
    valid_values = torch.where(mask.bool(), values, 0.0)
    return (valid_values * mask).sum(axis=axis)


def masked_mean(values, mask, axis=None):
    s = masked_sum(values, mask, axis)
    return s / (mask.sum(axis=axis) + 1e-8)


def agg_loss(loss_mat, loss_mask, loss_agg_mode, dp_size=1, batch_num_tokens=None,
             global_batch_size=None, loss_scale_factor=None):
    if loss_agg_mode == "token-mean":
        if batch_num_tokens is None:
            if dp_size > 1:
                raise ValueError("(global) batch_num_tokens is required when dp_size > 1")
            batch_num_tokens = loss_mask.sum()
        loss = masked_sum(loss_mat, loss_mask) / batch_num_tokens * dp_size
    else:
        raise ValueError(f"Invalid loss_agg_mode: {loss_agg_mode}")  # (other modes not used)
    return loss


class Config(dict):
    """The ActorConfig fields the losses read (`config.get` as a dict's)."""

    def __init__(self, clip_ratio, clip_ratio_low=None, clip_ratio_high=None, clip_ratio_c=10000.0,
                 batch_num_tokens=None):
        super().__init__(clip_ratio_c=clip_ratio_c)
        self.clip_ratio, self.clip_ratio_low, self.clip_ratio_high = clip_ratio, clip_ratio_low, clip_ratio_high
        self.global_batch_info = {} if batch_num_tokens is None else {"batch_num_tokens": batch_num_tokens}


def compute_policy_loss_dppo_tv(old_log_prob, log_prob, advantages, response_mask,
                                loss_agg_mode="token-mean", config=None, rollout_is_weights=None):
    # Note: the clip_ratio is different from the standard PPO, it is the TV divergence threshold for DPPO.
    clip_divergence = config.clip_ratio
    clip_divergence_low = config.clip_ratio_low if config.clip_ratio_low is not None else clip_divergence
    clip_divergence_high = config.clip_ratio_high if config.clip_ratio_high is not None else clip_divergence

    negative_approx_kl = log_prob - old_log_prob
    # Clamp negative_approx_kl for stability
    negative_approx_kl = torch.clamp(negative_approx_kl, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    ppo_kl = masked_mean(-negative_approx_kl, response_mask)  # noqa: F841 (a metric)

    clip_ratio_c = config.get("clip_ratio_c", 20.0)
    truncated_ratio = torch.clamp(ratio, max=clip_ratio_c)
    truncated_ratio = truncated_ratio.detach()

    # Compute valid mask for DPPO-Binary-TV
    prob = torch.exp(log_prob)
    old_prob = torch.exp(old_log_prob)
    valid_positive_mask = (prob - old_prob) <= clip_divergence_high
    valid_negative_mask = (prob - old_prob) >= -clip_divergence_low
    valid_mask = torch.where(advantages > 0, valid_positive_mask, valid_negative_mask)
    valid_mask = valid_mask.detach().float()

    pg_losses = -advantages * truncated_ratio * log_prob * valid_mask

    # Apply rollout correction weights if provided
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights

    pg_loss = agg_loss(
        loss_mat=pg_losses, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **config.global_batch_info
    )
    pg_clipfrac = masked_mean((1.0 - valid_mask).float(), response_mask)
    return pg_loss, pg_clipfrac


def compute_policy_loss_dppo_kl(old_log_prob, log_prob, advantages, response_mask,
                                loss_agg_mode="token-mean", config=None, rollout_is_weights=None):
    # Note: the clip_ratio is different from the standard PPO, it is the KL divergence threshold for DPPO.
    clip_divergence = config.clip_ratio
    clip_divergence_low = config.clip_ratio_low if config.clip_ratio_low is not None else clip_divergence
    clip_divergence_high = config.clip_ratio_high if config.clip_ratio_high is not None else clip_divergence

    negative_approx_kl = log_prob - old_log_prob
    # Clamp negative_approx_kl for stability
    negative_approx_kl = torch.clamp(negative_approx_kl, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)

    clip_ratio_c = config.get("clip_ratio_c", 20.0)
    truncated_ratio = torch.clamp(ratio, max=clip_ratio_c)
    truncated_ratio = truncated_ratio.detach()

    # Compute valid mask for DPPO-Binary-KL
    prob = torch.exp(log_prob)
    old_prob = torch.exp(old_log_prob)
    binary_kl = old_prob * (old_log_prob - log_prob) + (1 - old_prob) * torch.log(
        (1.0 - old_prob + 1e-8) / (1.0 - prob + 1e-8)
    )
    valid_positive_mask = (binary_kl <= clip_divergence_high) | (prob <= old_prob)
    valid_negative_mask = (binary_kl <= clip_divergence_low) | (prob >= old_prob)
    valid_mask = torch.where(advantages > 0, valid_positive_mask, valid_negative_mask)
    valid_mask = valid_mask.detach().float()

    pg_losses = -advantages * truncated_ratio * log_prob * valid_mask

    # Apply rollout correction weights if provided
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights

    pg_loss = agg_loss(
        loss_mat=pg_losses, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **config.global_batch_info
    )
    pg_clipfrac = masked_mean((1.0 - valid_mask).float(), response_mask)
    return pg_loss, pg_clipfrac


VERL = {"dppo_tv": compute_policy_loss_dppo_tv, "dppo_kl": compute_policy_loss_dppo_kl}


# ------------------------------------------------------------------------ Stable-RL


def _compute_token_mask_for_policy_loss(rollout_log_prob, old_log_prob, log_prob, advantages,
                                        response_mask, config=None, loss_mode=None):
    clip_ratio = config.clip_ratio
    cliprange_low = config.clip_ratio_low if config.clip_ratio_low is not None else clip_ratio
    cliprange_high = config.clip_ratio_high if config.clip_ratio_high is not None else clip_ratio

    prob = torch.exp(log_prob)
    rollout_prob = torch.exp(rollout_log_prob)

    if loss_mode == "dppo_binary_kl":
        kl = rollout_prob * (rollout_log_prob - log_prob) + (1 - rollout_prob) * torch.log((1.0 - rollout_prob + 1e-8) / (1.0 - prob + 1e-8))
        invalid_positive_mask = (kl > cliprange_high) & (prob > rollout_prob)
        invalid_negative_mask = (kl > cliprange_low) & (prob < rollout_prob)
    elif loss_mode == "dppo_binary_tv":
        invalid_positive_mask = (prob - rollout_prob) > cliprange_high
        invalid_negative_mask = (prob - rollout_prob) < -cliprange_low
    else:
        raise ValueError(f"Invalid loss_mode: {loss_mode}")  # (other modes not used)

    invalid_mask = torch.where(advantages > 0, invalid_positive_mask, invalid_negative_mask)
    valid_mask = 1.0 - invalid_mask.detach().float()
    valid_mask = valid_mask * response_mask.float()
    return valid_mask


def compute_policy_loss_with_mask(old_log_prob, log_prob, advantages, response_mask,
                                  loss_agg_mode="token-mean", config=None, rollout_log_prob=None,
                                  loss_mode=None):
    mask = _compute_token_mask_for_policy_loss(
        rollout_log_prob=rollout_log_prob, old_log_prob=old_log_prob, log_prob=log_prob,
        advantages=advantages, response_mask=response_mask, config=config, loss_mode=loss_mode)
    mask = mask.detach().float()

    clip_ratio_c = config.get("clip_ratio_c", 10.0)
    negative_approx_kl = log_prob - rollout_log_prob
    # Clamp negative_approx_kl for stability
    negative_approx_kl = torch.clamp(negative_approx_kl, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    ratio = torch.clamp(ratio, max=clip_ratio_c)
    ratio = ratio.detach()

    pg_losses = -advantages * ratio * mask * log_prob
    pg_loss = agg_loss(
        loss_mat=pg_losses, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **config.global_batch_info
    )
    return pg_loss


STABLE_RL = {"dppo_tv": "dppo_binary_tv", "dppo_kl": "dppo_binary_kl"}


# --------------------------------------------------------------------------- by hand


def test_defaults():
    assert METHOD_DEFAULTS["dppo_tv"] == {"delta_low": 0.15, "delta_high": 0.15, "clip_ratio_c": 10000.0}
    assert METHOD_DEFAULTS["dppo_kl"] == {"delta_low": 0.05, "delta_high": 0.05, "clip_ratio_c": 10000.0}


def names(state):
    return [[CLIP_STATES[s] for s in row] for row in state.tolist()]


def test_tv_by_hand():
    # Row 0, A = +1: q = [0.5, 0.2], p = [0.7, 0.3]: p - q = [0.2 > 0.15: masked, 0.1: kept].
    # Row 1, A = -1: q = [0.5, 0.6], p = [0.3, 0.55]: p - q = [-0.2 < -0.15: masked, -0.05].
    # J = w A log p on the kept tokens, w = r: 1.5 log 0.3 (row 0) and -(0.55/0.6) log 0.55;
    # dJ/dlogp = w A: 1.5 and -0.9167; loss = -J / 4.
    q = torch.tensor([[0.5, 0.2], [0.5, 0.6]], dtype=F64)
    p = torch.tensor([[0.7, 0.3], [0.3, 0.55]], dtype=F64)
    logp = p.log().requires_grad_()
    out = policy_loss("dppo_tv", logp, q.log(), torch.tensor([1.0, -1.0], dtype=F64),
                      torch.ones(2, 2, dtype=torch.bool))
    out.loss.backward()
    j = 1.5 * math.log(0.3) - (0.55 / 0.6) * math.log(0.55)
    assert out.loss.item() == pytest.approx(-j / 4, rel=1e-12)
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, -1.5 / 4], [0.0, (0.55 / 0.6) / 4]],
                                                       dtype=F64), rtol=1e-12, atol=0)
    assert names(out.clip_state) == [["masked", "none"], ["masked", "none"]]
    m = out.metrics
    assert (m["clip_frac_pos"], m["clip_frac_neg"], m["masked_frac"]) == (0.5, 0.5, 0.5)
    assert m["dppo_divergence"] == pytest.approx((0.2 + 0.1 + 0.2 + 0.05) / 4, rel=1e-12)
    assert (out.c_low, out.c_high) == (None, None)


def test_kl_by_hand_masks_only_the_direction_the_advantage_pushes():
    # A = +1 on every token; q = 0.5, p = 0.8 (up) and p = 0.1 (down).
    # D(0.5 -> 0.8) = 0.5 log(0.5/0.8) + 0.5 log(0.5/0.2) = 0.2231 > 0.05 and p > q: masked.
    # D(0.5 -> 0.1) = 0.5 log 5 + 0.5 log(0.5/0.9) = 0.5108 > 0.05 but p < q: kept (w = 0.2).
    q = torch.tensor([[0.5, 0.5]], dtype=F64)
    p = torch.tensor([[0.8, 0.1]], dtype=F64)
    logp = p.log().requires_grad_()
    out = policy_loss("dppo_kl", logp, q.log(), torch.tensor([1.0], dtype=F64),
                      torch.ones(1, 2, dtype=torch.bool))
    out.loss.backward()
    assert names(out.clip_state) == [["masked", "none"]]
    assert out.loss.item() == pytest.approx(-0.2 * math.log(0.1) / 2, rel=1e-12)
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, -0.2 / 2]], dtype=F64), rtol=1e-12, atol=0)
    d_up = 0.5 * math.log(0.5 / 0.8) + 0.5 * math.log(0.5 / 0.2)
    d_down = 0.5 * math.log(0.5 / 0.1) + 0.5 * math.log(0.5 / 0.9)
    assert out.metrics["dppo_divergence"] == pytest.approx((d_up + d_down) / 2, rel=1e-6)


def test_the_cap_truncates_the_weight_and_keeps_the_gradient():
    # clip_ratio_c = 2: q = 0.1, p = 0.24 (r = 2.4, p - q = 0.14, kept): w = 2, grad 2 A
    q, p = torch.tensor([[0.1]], dtype=F64), torch.tensor([[0.24]], dtype=F64)
    logp = p.log().requires_grad_()
    out = policy_loss("dppo_tv", logp, q.log(), torch.tensor([1.0], dtype=F64),
                      torch.ones(1, 1, dtype=torch.bool), clip_ratio_c=2.0)
    out.loss.backward()
    assert names(out.clip_state) == [["trunc_high"]]
    assert logp.grad.item() == pytest.approx(-2.0, rel=1e-12)


# -------------------------------------------------------- against the authors' code


def batch(seed, b=6, t=8, dtype=F64):
    """Right-padded responses (finite junk in the padding, as verl's), both advantage signs
    and one zero, probabilities spread over (0, 1) so that both masks and both directions
    occur."""
    g = torch.Generator().manual_seed(seed)
    old = torch.log(0.02 + 0.96 * torch.rand(b, t, generator=g, dtype=dtype))
    logp = torch.log(0.02 + 0.96 * torch.rand(b, t, generator=g, dtype=dtype))
    logp = torch.where(torch.rand(b, t, generator=g, dtype=dtype) < 0.5, old + 0.1 * (logp - old), logp)
    lengths = torch.randint(3, t + 1, (b,), generator=g)
    lengths[0] = t
    mask = (torch.arange(t)[None, :] < lengths[:, None]).to(dtype)
    adv = torch.randn(b, generator=g, dtype=dtype)
    adv[2] = 0.0
    adv[0], adv[1] = abs(adv[0]), -abs(adv[1])
    # A < 0, q = 0.1 -> p = 0.2: valid under both masks (the mass moved against the
    # advantage's push), r = 2 above a binding cap
    old[1, 2], logp[1, 2] = math.log(0.1), math.log(0.2)
    return old, logp, adv[:, None].expand(b, t).contiguous(), mask


def authors_config(method, **kw):
    delta = METHOD_DEFAULTS[method]["delta_low"]
    return Config(delta, delta, delta, **kw)


@pytest.mark.parametrize("cap", [10000.0, 1.5], ids=["script-cap", "binding-cap"])
@pytest.mark.parametrize("method", ["dppo_tv", "dppo_kl"])
@pytest.mark.parametrize("seed", range(4))
def test_equals_the_authors_code(seed, method, cap):
    old, logp, adv, mask = batch(seed)
    theirs = logp.clone().requires_grad_()
    ref, ref_clipfrac = VERL[method](old, theirs, adv, mask, config=authors_config(method, clip_ratio_c=cap))
    (ref_grad,) = torch.autograd.grad(ref, theirs)
    stable = logp.clone().requires_grad_()
    ref_stable = compute_policy_loss_with_mask(old, stable, adv, mask, config=authors_config(method, clip_ratio_c=cap),
                                               rollout_log_prob=old, loss_mode=STABLE_RL[method])
    (stable_grad,) = torch.autograd.grad(ref_stable, stable)

    ours = logp.clone().requires_grad_()
    out = policy_loss(method, ours, old, adv, mask.bool(), clip_ratio_c=cap)
    (grad,) = torch.autograd.grad(out.loss, ours)
    for loss, g in ((ref, ref_grad), (ref_stable, stable_grad)):
        torch.testing.assert_close(out.loss, loss, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(grad, g, rtol=1e-9, atol=1e-12)
    # `masked` is exactly the authors' invalid set on the tokens with A != 0 (theirs also
    # marks A = 0 tokens, which carry nothing); their pg_clipfrac counts those too
    valid = _compute_token_mask_for_policy_loss(old, old, logp, adv, mask, authors_config(method),
                                                loss_mode=STABLE_RL[method])
    invalid = mask.bool() & (valid == 0) & (adv != 0)
    masked = out.clip_state == CLIP_STATES.index("masked")
    assert torch.equal(masked, invalid)
    assert out.metrics["clip_frac"] <= float(ref_clipfrac) + 1e-9
    # the batch exercises every branch: both directions masked, kept tokens, the cap
    assert bool((masked & (adv > 0)).any() and (masked & (adv < 0)).any())
    assert bool(((out.clip_state == 0) & mask.bool()).any())
    assert bool((out.clip_state == CLIP_STATES.index("trunc_high")).any()) == (cap < 10)


@pytest.mark.parametrize("method", ["dppo_tv", "dppo_kl"])
def test_micro_batches_equal_the_authors_global_token_mean(method):
    # verl: each micro-batch's token sum over the mini-batch's tokens (batch_num_tokens);
    # the trainer: the whole mini-batch's denominator for each micro-batch.
    old, logp, adv, mask = batch(11, b=8)
    micro = [slice(0, 3), slice(3, 5), slice(5, 8)]
    n = int(mask.sum())
    theirs = logp.clone().requires_grad_()
    ref = sum(VERL[method](old[s], theirs[s], adv[s], mask[s],
                           config=authors_config(method, batch_num_tokens=n))[0] for s in micro)
    (ref_grad,) = torch.autograd.grad(ref, theirs)
    m = build_method(method)
    den = m.denominator(mask.bool(), None)
    ours = logp.clone().requires_grad_()
    total = sum(m.loss(ours[s], old[s], adv[s], mask[s].bool(), denominator=den).loss for s in micro)
    (grad,) = torch.autograd.grad(total, ours)
    torch.testing.assert_close(total, ref, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("method", ["dppo_tv", "dppo_kl"])
def test_float32_log_probs_agree_with_the_authors_code(method):
    old, logp, adv, mask = batch(3, dtype=torch.float32)
    theirs = logp.clone().requires_grad_()
    ref, _ = VERL[method](old, theirs, adv, mask, config=authors_config(method))
    (ref_grad,) = torch.autograd.grad(ref, theirs)
    ours = logp.clone().requires_grad_()
    out = policy_loss(method, ours, old, adv, mask.bool())
    (grad,) = torch.autograd.grad(out.loss, ours)
    torch.testing.assert_close(out.loss, ref, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("method", ["dppo_tv", "dppo_kl"])
@pytest.mark.parametrize(("params", "match"), [
    ({"delta_low": 0.0}, "^delta_low must be a finite number > 0"),
    ({"delta_high": -0.1}, "^delta_high must be a finite number > 0"),
    ({"clip_ratio_c": 0.0}, "^clip_ratio_c must be a finite number > 0"),
])
def test_bad_parameters_name_themselves(method, params, match):
    with pytest.raises(ValueError, match=match):
        build_method(method, params)
