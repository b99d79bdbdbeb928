"""m2po by hand and against a literal transcription of the authors' code.

The reference below is the authors' M2PO loss and the loop that calls it, transcribed from
github.com/Infini-AI-Lab/M2PO at commit 4514ce22cc5af605b150d3bb7d0deab82f783acd:
verl/trainer/ppo/core_algos.py (`agg_loss` token-mean, `_solve_tau_from_sorted_delta2`,
`_get_trust_region_tokens_delta_sq`, `kpo_clip_harmful_tokens`, `compute_m2po_policy_loss`),
verl/utils/torch_functional.py (`masked_mean`) and verl/workers/actor/dp_actor.py
(`update_policy`: each micro-batch's loss times len(micro)/ppo_mini_batch_size under
use_dynamic_bsz). Prints, commented-out code and the ratio statistics are left out; the
rest is as written there. The authors' run passes no miniclip floors (None, None).
"""

from __future__ import annotations

import math

import pytest
import torch

from src.algorithms import CLIP_STATES, METHOD_DEFAULTS, METHODS, build_method, policy_loss
from src.algorithms.methods.m2po import solve_tau

F64 = torch.float64


# ----------------------------------------------------------------- the authors' code


def masked_mean(values, mask, axis=None):
    return (values * mask).sum(axis=axis) / (mask.sum(axis=axis) + 1e-8)


def agg_loss(loss_mat, loss_mask, loss_agg_mode):
    if loss_agg_mode == "token-mean":
        loss = masked_mean(loss_mat, loss_mask)
    else:
        raise ValueError(f"Invalid loss_agg_mode: {loss_agg_mode}")  # (other modes not used)
    return loss


def _solve_tau_from_sorted_delta2(sorted_delta2, target_sum):
    if sorted_delta2.numel() == 0:
        return 100000

    total = float(sorted_delta2.sum().item())
    if target_sum >= total - 1e-12:  # no clipping needed
        return 100000
    if target_sum <= 1e-12:  # clip everything to 0
        return 0.0

    csum = torch.cumsum(sorted_delta2, dim=0)  # prefix sums
    n = sorted_delta2.numel()

    for k in range(0, n):
        left_sum = float(csum[k].item())
        rest = n - k - 1
        m2 = sorted_delta2[k].item() - 1e-12
        if m2 * rest + left_sum >= target_sum - 1e-12:
            if k == 0:
                return 0.0, csum[-1].item() / n
            else:
                M2_after = (sorted_delta2[k - 1].item() * (rest + 1) + float(csum[k - 1].item())) / n
                return float(sorted_delta2[k - 1].item() - 1e-12) ** 0.5, M2_after

    return 100000


def _get_trust_region_tokens_delta_sq(old_log_prob, log_prob, advantages, response_mask):
    mask = response_mask.bool()
    adv_example = advantages[:, 0]
    pos_adv_mask = adv_example > 1e-12
    neg_adv_mask = adv_example < -1e-12

    delta = (old_log_prob - log_prob)             # Δ = log p_old - log p_new
    ratio = torch.exp(-delta)                     # r = exp(log_new - log_old)

    pos_adv_response_mask = mask[pos_adv_mask]
    neg_adv_response_mask = mask[neg_adv_mask]

    pos_adv_ratio = ratio[pos_adv_mask]
    neg_adv_ratio = ratio[neg_adv_mask]

    pos_adv_r_gt_1_mask = pos_adv_ratio > 1.0 + 1e-12
    neg_adv_r_lt_1_mask = neg_adv_ratio < 1.0 - 1e-12

    delta_sq = delta.pow(2)
    pos_adv_harm_tokens_delta_sq = delta_sq[pos_adv_mask][pos_adv_r_gt_1_mask & pos_adv_response_mask]
    neg_adv_harm_tokens_delta_sq = delta_sq[neg_adv_mask][neg_adv_r_lt_1_mask & neg_adv_response_mask]

    tr_tokens_delta_sq = torch.cat([pos_adv_harm_tokens_delta_sq, neg_adv_harm_tokens_delta_sq])

    return tr_tokens_delta_sq


def kpo_clip_harmful_tokens(old_log_prob, log_prob, advantages, response_mask, KL2_budget=None):
    assert KL2_budget is not None, "KL2_budget must be set."

    tr_tokens_delta_sq = _get_trust_region_tokens_delta_sq(old_log_prob, log_prob, advantages, response_mask)
    token_num = tr_tokens_delta_sq.numel()

    if token_num == 0:  # no clipping needed
        return 0.0, 100000, 0.0, 0.0

    target_total = KL2_budget * float(token_num)
    M2_now = float(tr_tokens_delta_sq.sum().detach().item() / token_num)

    if M2_now <= KL2_budget + 1e-12:
        # No clipping needed -> effectively no constraint
        return 0.0, 100000, M2_now, M2_now

    sorted_delta2, _ = torch.sort(tr_tokens_delta_sq)  # ascending
    tau, M2_after = _solve_tau_from_sorted_delta2(sorted_delta2, target_total)

    # Map |Δ|<=τ to ratio bounds per quadrant
    clip_low = float(torch.exp(torch.tensor(-tau)).item())   # applies to (adv<0, r<1)
    clip_high = float(torch.exp(torch.tensor(+tau)).item())  # applies to (adv>0, r>1)

    return clip_low, clip_high, M2_now, M2_after


def compute_m2po_policy_loss(old_log_prob, log_prob, advantages, response_mask, M2_budget=None,
                             miniclip_low=0.3, miniclip_high=0.5, loss_agg_mode="token-mean"):
    clip_low, clip_high, M2_data, M2_after = kpo_clip_harmful_tokens(old_log_prob, log_prob, advantages, response_mask, M2_budget)

    clip_low = 1 - clip_low
    clip_high = clip_high - 1
    if miniclip_low is not None and clip_low < miniclip_low:
        clip_low = miniclip_low
    if miniclip_high is not None and clip_high < miniclip_high:
        clip_high = miniclip_high

    # ratio = exp(log_new - log_old)
    ratio = torch.exp(log_prob - old_log_prob)

    ##### clip
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)  # - clip(ratio, 1-cliprange, 1+cliprange) * A
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)  # max(-ratio * A, -clip(ratio, 1-cliprange, 1+cliprange) * A)
    pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses1).float(), response_mask)

    pg_loss = agg_loss(loss_mat=clip_pg_losses1, loss_mask=response_mask, loss_agg_mode=loss_agg_mode)

    ratio_stats = {"m2po/clip_low": clip_low, "m2po/clip_high": clip_high, "m2po/M2": M2_data,
                   "m2po/M2_after": M2_after, "m2po/M2_budget": M2_budget}
    return pg_loss, pg_clipfrac, ratio_stats


def authors_update(old_log_prob, log_prob, advantages, response_mask, micro_batches,
                   ppo_mini_batch_size, M2_budget):
    """dp_actor.update_policy over one mini-batch (use_m2po_loss, use_dynamic_bsz, no miniclip
    set): the micro-batches' scaled losses as their backward passes accumulate them."""
    total, stats = 0.0, []
    for rows in micro_batches:
        pg_loss, pg_clipfrac, ratio_stats = compute_m2po_policy_loss(
            old_log_prob=old_log_prob[rows], log_prob=log_prob[rows], advantages=advantages[rows],
            response_mask=response_mask[rows], M2_budget=M2_budget, miniclip_low=None,
            miniclip_high=None, loss_agg_mode="token-mean")
        # relative to the dynamic bsz
        total = total + pg_loss * (len(range(*rows.indices(len(log_prob)))) / ppo_mini_batch_size)
        stats.append((pg_clipfrac, ratio_stats))
    return total, stats


# -------------------------------------------------------------------------- by hand


def test_defaults_and_traits():
    assert METHOD_DEFAULTS["m2po"] == {"budget": 0.04}
    traits = METHODS["m2po"].traits
    assert traits.adaptive_bounds and traits.target == "budget"


def run(log_r, adv, mask=None, **params):
    """policy_loss with logp_behavior = 0, so log r = logp exactly."""
    log_r = torch.tensor(log_r, dtype=F64)
    logp = log_r.clone().requires_grad_()
    m = torch.ones_like(log_r, dtype=torch.bool) if mask is None else torch.tensor(mask)
    out = policy_loss("m2po", logp, torch.zeros_like(log_r), torch.tensor(adv, dtype=F64), m,
                      **params)
    out.loss.backward()
    return out, logp.grad


def names(state):
    return [[CLIP_STATES[s] for s in row] for row in state.tolist()]


def test_under_the_budget_nothing_is_clipped():
    # log r [0.1, -0.3, 0.2], A [+1, +1, -1]. Harmful: only token 0 (A > 0, r > 1), (log r)^2
    # = 0.01; token 1 (A > 0, r < 1) and token 2 (A < 0, r > 1) are not. M2 = 0.01 <= 0.04:
    # no clip, J = r A on every token: loss = -(e^0.1 + e^-0.3 - e^0.2) / 3, grad -r A / 3.
    out, grad = run([[0.1, -0.3, 0.2]], [[1.0, 1.0, -1.0]])
    assert out.loss.item() == pytest.approx(-(math.exp(0.1) + math.exp(-0.3) - math.exp(0.2)) / 3,
                                            rel=1e-12)
    expected = [-math.exp(0.1) / 3, -math.exp(-0.3) / 3, math.exp(0.2) / 3]
    torch.testing.assert_close(grad[0], torch.tensor(expected, dtype=F64), rtol=1e-12, atol=0)
    m = out.metrics
    assert (m["m2_harmful"], m["m2_harmful_after"]) == (pytest.approx(0.01), pytest.approx(0.01))
    assert (m["m2po_tau"], m["m2po_harmful_tokens"], m["clip_frac"]) == (None, 1, 0.0)
    assert (out.c_low, out.c_high, m["c_low"], m["c_high"]) == (None, None, None, None)


def test_no_harmful_token_no_clip_however_far_the_ratios():
    # log r [-0.5, 0.7], A [+1, -1]: both moved against their advantage, none is harmful,
    # so M2 is undefined and nothing is clipped: loss = -(e^-0.5 - e^0.7) / 2.
    out, grad = run([[-0.5, 0.7]], [[1.0, -1.0]])
    assert out.loss.item() == pytest.approx(-(math.exp(-0.5) - math.exp(0.7)) / 2, rel=1e-12)
    torch.testing.assert_close(grad[0], torch.tensor([-math.exp(-0.5) / 2, math.exp(0.7) / 2],
                                                     dtype=F64), rtol=1e-12, atol=0)
    m = out.metrics
    assert (m["m2_harmful"], m["m2_harmful_after"], m["m2po_tau"], m["m2po_harmful_tokens"]) == (
        None, None, None, 0)


def test_every_harmful_token_past_the_budget_gives_tau_zero():
    # log r [0.3, -0.4, -0.2, 0.25], A [+1, -1, +1, 0]. Harmful: token 0 (v = 0.09) and
    # token 1 (A < 0, r < 1, v = 0.16); token 2 (A > 0, r < 1) and token 3 (A = 0) are not.
    # M2 = 0.125 > 0.04, S = 0.04 * 2 = 0.08; k = 0: (0.09 - 1e-12) * 1 + 0.09 >= 0.08, so
    # tau = 0 and the bounds are [1, 1]: token 0 clip_high (J = 1), token 1 clip_low (J = -1),
    # token 2 keeps r A (A > 0, r < c_low is not clipped), token 3 adds 0.
    # loss = -(1 - 1 + e^-0.2 + 0) / 4; gradient only on token 2: -e^-0.2 / 4.
    out, grad = run([[0.3, -0.4, -0.2, 0.25]], [[1.0, -1.0, 1.0, 0.0]])
    assert names(out.clip_state) == [["clip_high", "clip_low", "none", "none"]]
    assert out.loss.item() == pytest.approx(-math.exp(-0.2) / 4, rel=1e-12)
    torch.testing.assert_close(grad[0], torch.tensor([0.0, 0.0, -math.exp(-0.2) / 4, 0.0],
                                                     dtype=F64), rtol=1e-12, atol=0)
    m = out.metrics
    assert (out.c_low, out.c_high, m["m2po_tau"]) == (1.0, 1.0, 0.0)
    assert m["m2_harmful"] == pytest.approx(0.125) and m["m2_harmful_after"] == 0.0


def test_tau_at_the_breakpoint_by_hand():
    # Row 0, A = +1: log r [0.1, 0.3, 0.5, -0.6]; row 1, A = -1: log r [-0.25, padding].
    # Harmful (log r)^2, ascending: v = [0.01, 0.0625, 0.09, 0.25] (the -0.6 token has A > 0
    # and r < 1: not harmful). M2 = 0.4125 / 4 = 0.103125 > 0.04; S = 0.16.
    #   k = 0: (0.01 - 1e-12) * 3 + 0.01 = 0.04 < 0.16
    #   k = 1: (0.0625 - 1e-12) * 2 + 0.0725 = 0.1975 >= 0.16  -> k = 1
    # tau^2 = v_0 - 1e-12, tau = 0.1 - 5e-12; M2 after capping at it: 4 * 0.01 / 4 = 0.01.
    # Bounds: float32 exp of float32(tau) = 0.10000000149: c_high = 1.1051709651947021, just
    # above e^0.1 = 1.1051709180756477, so the 0.1 token keeps its gradient (it sits on the
    # bound up to the authors' float32 rounding); c_low = 0.904837429523468.
    # States: [none, clip_high, clip_high, none], [clip_low (r = e^-0.25 < c_low)].
    # J = e^0.1 + 2 c_high + e^-0.6 - c_low over N = 5 tokens; gradient -r A / 5 on the two
    # unclipped tokens, 0 elsewhere.
    c_low, c_high = 0.904837429523468, 1.1051709651947021
    out, grad = run([[0.1, 0.3, 0.5, -0.6], [-0.25, 9.0, 9.0, 9.0]], [[1.0] * 4, [-1.0] * 4],
                    mask=[[True] * 4, [True, False, False, False]])
    assert (out.c_low, out.c_high) == (c_low, c_high)
    assert names(out.clip_state)[0] == ["none", "clip_high", "clip_high", "none"]
    assert names(out.clip_state)[1][0] == "clip_low"
    j = math.exp(0.1) + 2 * c_high + math.exp(-0.6) - c_low
    assert out.loss.item() == pytest.approx(-j / 5, rel=1e-12)
    expected = [[-math.exp(0.1) / 5, 0.0, 0.0, -math.exp(-0.6) / 5], [0.0] * 4]
    torch.testing.assert_close(grad, torch.tensor(expected, dtype=F64), rtol=1e-12, atol=0)
    m = out.metrics
    assert m["m2po_tau"] == pytest.approx(0.1, abs=1e-11) and m["m2po_harmful_tokens"] == 4
    assert m["m2_harmful"] == pytest.approx(0.103125, rel=1e-12)
    assert m["m2_harmful_after"] == pytest.approx(0.01, abs=1e-11)
    assert m["clip_frac"] == pytest.approx(3 / 5)


def test_solve_tau_breakpoints_by_hand():
    v = torch.tensor([0.01, 0.0625, 0.09, 0.25], dtype=F64)
    assert solve_tau(v, 0.04) == pytest.approx(0.1, abs=1e-11)  # k = 1 (worked above)
    # budget 0.07, S = 0.28: k = 1 gives 0.1975 < 0.28; k = 2: 0.09 + 0.1625 = 0.2525 < 0.28;
    # k = 3: 0.4125 >= 0.28, so tau^2 = v_2 = 0.09
    assert solve_tau(v, 0.07) == pytest.approx(0.3, abs=1e-11)
    # budget 0.005, S = 0.02: k = 0 already gives 0.04 >= 0.02: tau = 0
    assert solve_tau(v, 0.005) == 0.0


def test_loss_needs_the_decision():
    method = build_method("m2po")
    x = torch.zeros(1, 2, dtype=F64)
    with pytest.raises(ValueError, match="call decide"):
        method.loss(x, x, torch.ones(1, dtype=F64), torch.ones(1, 2, dtype=torch.bool))


def test_bad_budget_names_itself():
    with pytest.raises(ValueError, match="^budget must be a finite number > 0"):
        build_method("m2po", {"budget": 0.0})


# ---------------------------------------------------------- against the authors' code


def batch(seed, scenario, b=6, t=7, dtype=F64):
    """verl's tensors for one mini-batch: right-padded responses (padding holds finite junk, as
    verl's does), advantages = score * response_mask (one response with A = 0)."""
    g = torch.Generator().manual_seed(seed)
    old = -3.0 * torch.rand(b, t, generator=g, dtype=dtype)
    scale = 0.05 if scenario == "under_budget" else 0.3
    log_r = scale * torch.randn(b, t, generator=g, dtype=dtype)
    lengths = torch.randint(3, t + 1, (b,), generator=g)
    lengths[0] = t
    mask = (torch.arange(t)[None, :] < lengths[:, None]).long()
    score = torch.randn(b, generator=g, dtype=dtype)
    score[2] = 0.0
    if scenario in ("clip", "micro"):
        log_r[0, 1], log_r[1, 2] = 3.0, -3.0  # far outside any bound
    if scenario == "no_harmful":  # every ratio moved against its advantage
        log_r = -torch.sign(score)[:, None] * log_r.abs()
    if scenario == "tau0":  # every harmful token already past the budget: v >= 0.09
        log_r = torch.sign(log_r) * (0.3 + log_r.abs())
    adv = score[:, None] * mask
    return old, old + log_r, adv, mask


SCENARIOS = ("clip", "under_budget", "no_harmful", "tau0")


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_equals_the_authors_code(scenario, seed):
    old, logp, adv, mask = batch(seed, scenario)
    mini = slice(0, len(logp))
    theirs = logp.clone().requires_grad_()
    ref, ((ref_clipfrac, stats),) = authors_update(old, theirs, adv, mask, [mini], len(logp), 0.04)
    (ref_grad,) = torch.autograd.grad(ref, theirs)

    ours = logp.clone().requires_grad_()
    out = policy_loss("m2po", ours, old, adv, mask.bool())
    (grad,) = torch.autograd.grad(out.loss, ours)
    # masked_mean divides by N + 1e-8: the two losses differ by that, 1e-8 / N relative
    torch.testing.assert_close(out.loss, ref, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-9, atol=1e-12)

    m = out.metrics
    tau = m["m2po_tau"]
    expected_tau = {"under_budget": None, "no_harmful": None, "tau0": 0.0}
    if scenario in expected_tau:
        assert tau == expected_tau[scenario]  # the batch is the case it is meant to be
    else:
        assert tau is not None and tau > 0.0
    if tau is None:
        assert (out.c_low, out.c_high) == (None, None)
        assert (stats["m2po/clip_low"], stats["m2po/clip_high"]) == (1.0, 99999)
    else:  # the bounds to the last bit
        assert (out.c_low, out.c_high) == (1 - stats["m2po/clip_low"], 1 + stats["m2po/clip_high"])
    if scenario == "no_harmful":
        assert m["m2po_harmful_tokens"] == 0 and m["m2_harmful"] is None
    else:
        assert m["m2_harmful"] == pytest.approx(stats["m2po/M2"], rel=1e-12)
    if tau is not None and tau > 0.0:
        assert m["m2_harmful_after"] == pytest.approx(stats["m2po/M2_after"], abs=1e-10)
    # the authors' clip fraction counts the same tokens as clip_frac
    assert m["clip_frac"] == pytest.approx(float(ref_clipfrac), rel=1e-7)


def test_far_outside_ratios_make_it_clip():
    # the "clip" batches: the +-3 log-ratios alone put M2 far above the budget
    for seed in range(4):
        old, logp, adv, mask = batch(seed, "clip")
        out = policy_loss("m2po", logp, old, adv, mask.bool())
        assert out.metrics["m2po_tau"] < 3.0 and out.metrics["clip_frac"] > 0


@pytest.mark.parametrize("seed", range(3))
def test_per_micro_batch_decisions_add_up_as_in_the_authors_trainer(seed):
    # dp_actor decides per micro-batch and scales each micro-batch's token-mean by its share
    # of the mini-batch's responses; the project's method decided on each micro-batch and
    # scaled the same way (as the verl plug runs it) gives their update exactly.
    old, logp, adv, mask = batch(seed, "micro", b=8)
    micro = [slice(0, 3), slice(3, 5), slice(5, 8)]
    theirs = logp.clone().requires_grad_()
    ref, stats = authors_update(old, theirs, adv, mask, micro, 8, 0.04)
    (ref_grad,) = torch.autograd.grad(ref, theirs)

    ours = logp.clone().requires_grad_()
    method = build_method("m2po")
    total = 0.0
    for rows in micro:
        decision = method.decide(method.decision_inputs(ours[rows], old[rows], adv[rows],
                                                        mask[rows].bool()))
        loss = method.loss(ours[rows], old[rows], adv[rows], mask[rows].bool(), decision).loss
        total = total + loss * (rows.stop - rows.start) / 8
    (grad,) = torch.autograd.grad(total, ours)
    torch.testing.assert_close(total, ref, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-9, atol=1e-12)
    # the micro-batches decided differently: a whole-batch decision is another update
    assert len({s["m2po/clip_high"] for _, s in stats}) > 1


def test_float32_log_probs_agree_with_the_authors_code():
    # the log-probs' dtype in training: the harmful set and the bounds are theirs; the sums
    # here run in float64 (theirs in float32), so the losses agree to float32 rounding
    old, logp, adv, mask = batch(7, "clip", dtype=torch.float32)
    theirs = logp.clone().requires_grad_()
    ref, ((_, stats),) = authors_update(old, theirs, adv, mask, [slice(0, len(logp))],
                                        len(logp), 0.04)
    (ref_grad,) = torch.autograd.grad(ref, theirs)
    ours = logp.clone().requires_grad_()
    out = policy_loss("m2po", ours, old, adv, mask.bool())
    (grad,) = torch.autograd.grad(out.loss, ours)
    assert (out.c_low, out.c_high) == (1 - stats["m2po/clip_low"], 1 + stats["m2po/clip_high"])
    torch.testing.assert_close(out.loss, ref, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-6, atol=1e-7)


def test_decision_taken_once_is_shared_by_the_micro_batches():
    # the trainer's path: one decision on the whole mini-batch, each micro-batch its slice of
    # the loss with the whole mini-batch's denominator
    old, logp, adv, mask = batch(3, "clip")
    method = build_method("m2po")
    decision = method.decide(method.decision_inputs(logp, old, adv, mask.bool()))
    whole = method.loss(logp, old, adv, mask.bool(), decision)
    den = method.denominator(mask.bool(), decision)
    parts = sum(method.loss(logp[s], old[s], adv[s], mask[s].bool(), decision.take(s, 7),
                            denominator=den).loss for s in (slice(0, 2), slice(2, 6)))
    torch.testing.assert_close(parts, whole.loss, rtol=1e-12, atol=1e-15)
