"""sapo by hand and against literal transcriptions of the two frameworks that ship it.

The paper's authors published no code. The references below are transcribed from
- verl, github.com/volcengine/verl at b178a3cd56f58b2d502255daba591e92833930a7:
  verl/trainer/ppo/core_algos.py `compute_policy_loss_sapo` and `agg_loss`, and
  verl/utils/torch_functional.py `masked_sum` (the config's type asserts and the metrics it
  returns are left out; `config` is a stand-in with the fields it reads);
- TRL, github.com/huggingface/trl at f2cd57710ae345ea6428ae95363267fcf38a3dc8:
  trl/trainer/grpo_trainer.py `_compute_loss`, the lines that run for loss_type="sapo" with
  token-level importance sampling, beta = 0 and no vLLM correction.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from src.algorithms import CLIP_STATES, METHOD_DEFAULTS, build_method, policy_loss

F64 = torch.float64
AGG = "seq-mean-token-mean"  # conf/method/sapo.yaml's, as both frameworks force it


# ------------------------------------------------------------------------ verl's code


def masked_sum(values, mask, axis=None):
    valid_values = torch.where(mask.bool(), values, 0.0)
    return (valid_values * mask).sum(axis=axis)


def agg_loss(loss_mat, loss_mask, loss_agg_mode, dp_size=1, batch_num_tokens=None,
             global_batch_size=None, loss_scale_factor=None):
    if loss_agg_mode == "seq-mean-token-mean":
        seq_mask = torch.sum(loss_mask, dim=-1)  # per-sequence token count
        seq_losses = torch.sum(loss_mat * loss_mask, dim=-1) / (seq_mask + 1e-8)  # token-mean
        seq_mask = (seq_mask > 0).float()  # exclude fully masked sequences
        if global_batch_size is None:
            global_batch_size = seq_mask.sum()
        loss = masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size  # seq-mean
    else:
        raise ValueError(f"Invalid loss_agg_mode: {loss_agg_mode}")  # (other modes not used)
    return loss


def compute_policy_loss_sapo(old_log_prob, log_prob, advantages, response_mask,
                             loss_agg_mode="seq-mean-token-mean", config=None,
                             rollout_is_weights=None):
    # temperature for positive and negative token updates
    tau_pos = torch.as_tensor(config.tau_pos, dtype=advantages.dtype, device=advantages.device)
    tau_neg = torch.as_tensor(config.tau_neg, dtype=advantages.dtype, device=advantages.device)

    def gate_function(x, tau):
        """The gating function used in SAPO"""
        return torch.sigmoid(tau * (x - 1.0)) * (4.0 / tau)

    negative_approx_kl = log_prob - old_log_prob
    # Clamp negative_approx_kl for stability
    negative_approx_kl = torch.clamp(negative_approx_kl, min=-20.0, max=20.0)
    # finally exp() to remove log and get r_{i,t}(θ)
    ratio = torch.exp(negative_approx_kl)

    # tau_{i,t} is tau_pos if adv > 0 else tau_neg
    taus = torch.where(
        condition=advantages > 0,
        input=tau_pos,  # if A_{i,t} > 0 we set to tau_pos
        other=tau_neg,  # if A_{i,t} <= 0 we set to tau_neg
    )

    # compute the gates f_{i,t}(r_{i,t}(θ)) at token level
    gates = gate_function(ratio, taus)

    # compute policy gradient loss
    pg_losses = -gates * advantages

    # Apply rollout correction weights if provided
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights

    # for SAPO, we need to aggregate the loss at the sequence level (seq-mean-token-mean)
    pg_loss = agg_loss(
        loss_mat=pg_losses, loss_mask=response_mask, loss_agg_mode="seq-mean-token-mean", **config.global_batch_info
    )
    return pg_loss


def verl_config(global_batch_size=None, tau_pos=1.0, tau_neg=1.05):
    info = {} if global_batch_size is None else {"global_batch_size": global_batch_size}
    return SimpleNamespace(tau_pos=tau_pos, tau_neg=tau_neg, global_batch_info=info)


# ------------------------------------------------------------------------- TRL's code


def trl_sapo_loss(per_token_logps, old_per_token_logps, advantages, mask,
                  sapo_temperature_pos=1.0, sapo_temperature_neg=1.05,
                  current_gradient_accumulation_steps=1):
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    log_ratio = per_token_logps - old_per_token_logps
    log_importance_weights = log_ratio  # importance_sampling_level == "token"
    coef_1 = torch.exp(log_importance_weights)
    temperatures = torch.where(advantages > 0, sapo_temperature_pos, sapo_temperature_neg)
    soft_coef_1 = torch.sigmoid(temperatures * (coef_1 - 1)) * 4 / temperatures
    per_token_loss = -soft_coef_1 * advantages
    loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    normalizer = current_gradient_accumulation_steps  # mode == "train"
    loss = loss / normalizer
    return loss


# --------------------------------------------------------------------------- by hand


def test_defaults():
    assert METHOD_DEFAULTS["sapo"] == {"tau_pos": 1.0, "tau_neg": 1.05}


def names(state):
    return [[CLIP_STATES[s] for s in row] for row in state.tolist()]


def sig(z):
    return 1.0 / (1.0 + math.exp(-z))


def test_by_hand():
    # Row 0, A = +1 (tau 1): r = 1 and 2. Row 1, A = -1 (tau 1.05): r = 0.5 and 4.
    #   f(r) = sig(tau (r - 1)) * 4 / tau; dJ/dlogp = 4 s (1 - s) r A, s = sig(tau (r - 1))
    #   r = 1: s = 0.5, f = 2, gate 1, dJ/dlogp = 1
    #   r = 2: s = sig(1) = 0.731, gate 4 (0.731)(0.269) = 0.786, dJ/dlogp = 0.786 * 2
    #   r = 0.5, tau 1.05: s = sig(-0.525), J = -f, dJ/dlogp = -gate * 0.5
    #   r = 4, tau 1.05: s = sig(3.15) = 0.959, gate 0.158 < 1/2: `gated`
    # seq-mean-token-mean: loss = -(mean row 0 + mean row 1) / 2; each token's gradient is
    # its dJ/dlogp / 2 (its row's length) / 2 (rows).
    r = torch.tensor([[1.0, 2.0], [0.5, 4.0]], dtype=F64)
    logp = r.log().requires_grad_()
    adv = torch.tensor([1.0, -1.0], dtype=F64)
    out = policy_loss("sapo", logp, torch.zeros_like(r), adv, torch.ones(2, 2, dtype=torch.bool),
                      aggregation=AGG)
    out.loss.backward()
    taus = [[1.0, 1.0], [1.05, 1.05]]
    s = [[sig(taus[i][j] * (r[i, j].item() - 1)) for j in range(2)] for i in range(2)]
    f = [[s[i][j] * 4 / taus[i][j] for j in range(2)] for i in range(2)]
    a = [1.0, -1.0]
    j_rows = [(f[i][0] + f[i][1]) * a[i] / 2 for i in range(2)]
    assert out.loss.item() == pytest.approx(-(j_rows[0] + j_rows[1]) / 2, rel=1e-12)
    gate = [[4 * s[i][j] * (1 - s[i][j]) for j in range(2)] for i in range(2)]
    expected = [[-gate[i][j] * r[i, j].item() * a[i] / 4 for j in range(2)] for i in range(2)]
    torch.testing.assert_close(logp.grad, torch.tensor(expected, dtype=F64), rtol=1e-12, atol=0)
    assert f[0][0] == 2.0 and gate[0][0] == 1.0 and gate[1][1] < 0.5 < gate[1][0]
    assert names(out.clip_state) == [["none", "none"], ["none", "gated"]]
    m = out.metrics
    assert m["clip_frac"] == 0.0 and m["gated_frac"] == 0.25  # no token loses its gradient
    assert m["sapo_gate_pos"] == pytest.approx((gate[0][0] + gate[0][1]) / 2, rel=1e-12)
    assert m["sapo_gate_neg"] == pytest.approx((gate[1][0] + gate[1][1]) / 2, rel=1e-12)
    assert (out.c_low, out.c_high) == (None, None)
    # equal lengths: the per-response weighting leaves the positive share as the metrics' own
    g = [[gate[i][j] * r[i, j].item() for j in range(2)] for i in range(2)]
    share = sum(g[0]) / (sum(g[0]) + sum(g[1]))
    assert m["sapo_grad_pos_share"] == pytest.approx(share, rel=1e-12)
    assert m["contrib_grad_pos_share"] == pytest.approx(share, rel=1e-12)


def test_the_aggregated_positive_share_weighs_tokens_as_the_loss_does():
    # Row 0, A = +1, one token; row 1, A = -1, three tokens; every r = 1 (gate 1, w = 1).
    # Every token alike: 1 / (1 + 3) = 0.25. Per-response means: 1 / (1 + 3 * 1/3) = 0.5,
    # and under token-mean the two readings agree.
    logp = torch.zeros(2, 3, dtype=F64, requires_grad=True)
    mask = torch.tensor([[True, False, False], [True, True, True]])
    adv = torch.tensor([1.0, -1.0], dtype=F64)
    out = policy_loss("sapo", logp, torch.zeros(2, 3, dtype=F64), adv, mask, aggregation=AGG)
    assert out.metrics["contrib_grad_pos_share"] == pytest.approx(0.25, rel=1e-12)
    assert out.metrics["sapo_grad_pos_share"] == pytest.approx(0.5, rel=1e-12)
    out = policy_loss("sapo", logp, torch.zeros(2, 3, dtype=F64), adv, mask, aggregation="token-mean")
    assert out.metrics["sapo_grad_pos_share"] == pytest.approx(0.25, rel=1e-12)


def test_a_zero_advantage_takes_tau_neg_and_carries_nothing():
    # A = 0: the gate uses tau_neg (verl and TRL: "A <= 0"), J = 0, no gradient
    logp = torch.tensor([[0.3, -0.2]], dtype=F64, requires_grad=True)
    out = policy_loss("sapo", logp, torch.zeros(1, 2, dtype=F64), torch.tensor([0.0], dtype=F64),
                      torch.ones(1, 2, dtype=torch.bool), aggregation=AGG)
    out.loss.backward()
    assert out.loss.item() == 0.0 and logp.grad.abs().max().item() == 0.0


def test_a_clamped_log_ratio_has_no_gradient():
    # verl clamps log r to [-20, 20]: beyond it the gate is constant in logp (unclamped,
    # r = e^-25 would keep a gradient of ~1e-11)
    logp = torch.tensor([[-25.0, 0.1]], dtype=F64, requires_grad=True)
    out = policy_loss("sapo", logp, torch.zeros(1, 2, dtype=F64), torch.tensor([1.0], dtype=F64),
                      torch.ones(1, 2, dtype=torch.bool), aggregation=AGG)
    out.loss.backward()
    assert logp.grad[0, 0].item() == 0.0 and logp.grad[0, 1].item() != 0.0
    assert names(out.clip_state) == [["masked", "none"]]


# ------------------------------------------------------ against verl's and TRL's code


def batch(seed, b=6, t=7, spread=1.2, far=False, dtype=F64):
    """Right-padded responses, advantages with both signs and one zero, log r wide enough
    that some tokens are `gated` (and with `far`, two beyond verl's clamp)."""
    g = torch.Generator().manual_seed(seed)
    old = -3.0 * torch.rand(b, t, generator=g, dtype=dtype)
    log_r = spread * torch.randn(b, t, generator=g, dtype=dtype)
    lengths = torch.randint(2, t + 1, (b,), generator=g)
    lengths[0] = t
    mask = (torch.arange(t)[None, :] < lengths[:, None]).to(dtype)
    adv = torch.randn(b, generator=g, dtype=dtype)
    adv[2] = 0.0
    adv[0], adv[1] = abs(adv[0]), -abs(adv[1])
    log_r[0, 0], log_r[1, 0] = 1.6, 1.9  # gated on both signs (|r - 1| > 1.763 / tau)
    if far:
        log_r[0, 1], log_r[1, 1] = 22.0, -21.0
    return old, old + log_r, adv[:, None].expand(b, t).contiguous(), mask


def ours(old, logp, adv, mask, **kw):
    theirs = logp.clone().requires_grad_()
    out = policy_loss("sapo", theirs, old, adv, mask.bool(), aggregation=AGG, **kw)
    (grad,) = torch.autograd.grad(out.loss, theirs)
    return out, grad


@pytest.mark.parametrize("far", [False, True], ids=["inside-clamp", "beyond-clamp"])
@pytest.mark.parametrize("seed", range(4))
def test_equals_verls_code(seed, far):
    old, logp, adv, mask = batch(seed, far=far)
    theirs = logp.clone().requires_grad_()
    ref = compute_policy_loss_sapo(old, theirs, adv, mask, config=verl_config())
    (ref_grad,) = torch.autograd.grad(ref, theirs)
    out, grad = ours(old, logp, adv, mask)
    # verl's token mean divides by n + 1e-8: 1e-8 / n relative
    torch.testing.assert_close(out.loss, ref, rtol=1e-7, atol=1e-10)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-7, atol=1e-10)
    states = set(names(out.clip_state)[0] + names(out.clip_state)[1])
    assert "gated" in states and "none" in states  # the batch is the case it is meant to be
    assert ("masked" in states) == far


@pytest.mark.parametrize("seed", range(4))
def test_equals_trls_code(seed):
    old, logp, adv, mask = batch(seed)
    theirs = logp.clone().requires_grad_()
    ref = trl_sapo_loss(theirs, old, adv[:, 0], mask)
    (ref_grad,) = torch.autograd.grad(ref, theirs)
    out, grad = ours(old, logp, adv, mask)
    # TRL's temperatures come from torch.where on two Python floats: float32 1.05
    torch.testing.assert_close(out.loss, ref, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("seed", range(3))
def test_micro_batches_equal_verls_global_batch_and_trls_accumulation(seed):
    # The trainer: one mini-batch of 6 responses in micro-batches of 2, each loss divided by
    # the whole mini-batch's denominator (its 6 responses). verl: each micro-batch's loss with
    # global_batch_size = 6; TRL: each micro-batch's mean over its rows / 3 accumulation steps.
    old, logp, adv, mask = batch(seed)
    micro = [slice(0, 2), slice(2, 4), slice(4, 6)]
    method = build_method("sapo", aggregation=AGG)
    den = method.denominator(mask.bool(), None)
    assert den == 6.0
    ours_ = logp.clone().requires_grad_()
    total = sum(method.loss(ours_[s], old[s], adv[s], mask[s].bool(), denominator=den).loss
                for s in micro)
    (grad,) = torch.autograd.grad(total, ours_)
    for reference in ("verl", "trl"):
        theirs = logp.clone().requires_grad_()
        if reference == "verl":
            ref = sum(compute_policy_loss_sapo(old[s], theirs[s], adv[s], mask[s],
                                               config=verl_config(global_batch_size=6))
                      for s in micro)
        else:
            ref = sum(trl_sapo_loss(theirs[s], old[s], adv[s, 0], mask[s],
                                    current_gradient_accumulation_steps=3) for s in micro)
        (ref_grad,) = torch.autograd.grad(ref, theirs)
        torch.testing.assert_close(total, ref, rtol=1e-6, atol=1e-9)
        torch.testing.assert_close(grad, ref_grad, rtol=1e-6, atol=1e-9)


def test_float32_log_probs_agree_with_verls_code():
    old, logp, adv, mask = batch(5, dtype=torch.float32)
    theirs = logp.clone().requires_grad_()
    ref = compute_policy_loss_sapo(old, theirs, adv, mask, config=verl_config())
    (ref_grad,) = torch.autograd.grad(ref, theirs)
    out, grad = ours(old, logp, adv, mask)
    torch.testing.assert_close(out.loss, ref, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(("params", "match"), [
    ({"tau_pos": 0.0}, "^tau_pos must be a finite number > 0"),
    ({"tau_neg": -1.05}, "^tau_neg must be a finite number > 0"),
    ({"tau_pos": math.inf}, "^tau_pos must be a finite number > 0"),
])
def test_bad_parameters_name_themselves(params, match):
    with pytest.raises(ValueError, match=match):
        build_method("sapo", params)
