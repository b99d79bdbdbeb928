"""The four methods behind `policy_loss`, worked by hand and against plain-Python loops.

Conventions in the hand cases: logp_behavior = 0 and logp = log(r), so the ratio is r.
Autograd gives d(-loss)/d(logp_t) = scale_t * dJ_t/dlogp_t, where dJ_t/dlogp_t = A_t * r_t
on gradient-carrying tokens (dr/dlogp = r) and exactly 0 on clipped ones; scale_t is the
aggregation weight (token-mean: 1/N).
"""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from src.algorithms import CLIP_STATES, METHOD_DEFAULTS, METHODS, policy_loss

F64 = torch.float64
AGGS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def make(ratios, mask=None, logp_behavior=None):
    r = torch.tensor(ratios, dtype=F64)
    lb = torch.zeros_like(r) if logp_behavior is None else torch.tensor(logp_behavior, dtype=F64)
    logp = (r.log() + lb).requires_grad_()
    m = torch.ones_like(r, dtype=torch.bool) if mask is None else torch.tensor(mask)
    return logp, lb, m


def run(method, ratios, adv, mask=None, logp_behavior=None, **params):
    logp, lb, m = make(ratios, mask, logp_behavior)
    out = policy_loss(method, logp, lb, torch.tensor(adv, dtype=F64), m, **params)
    out.loss.backward()
    return out, logp.grad


def names(state):
    return [[CLIP_STATES[s] for s in row] for row in state.tolist()]


def close(x, y, tol=1e-12):
    torch.testing.assert_close(torch.as_tensor(x, dtype=F64), torch.as_tensor(y, dtype=F64),
                               rtol=tol, atol=tol)


def test_registry_and_defaults_match_docs_methods():
    assert set(METHODS) >= {"ppo", "clip_higher", "top_entropy", "bapo"}
    assert METHOD_DEFAULTS["ppo"] == {"c_low": 0.8, "c_high": 1.2, "dual_clip_c": None}
    assert METHOD_DEFAULTS["clip_higher"] == {"c_low": 0.8, "c_high": 1.28, "dual_clip_c": None}
    assert METHOD_DEFAULTS["top_entropy"] == {"c_low": 0.8, "c_high": 1.28, "dual_clip_c": None,
                                              "q": 0.2, "scope": "minibatch"}
    d = METHOD_DEFAULTS["bapo"]
    assert (d["rho0"], d["low_start"], d["low_max"], d["high_start"], d["high_max"],
            d["high_step"], d["low_step"]) == (0.4, 0.6, 0.9, 1.2, 3.0, 0.05, 0.02)
    assert (d["contribution"], d["weights"], d["order"], d["search"], d["dual_clip_c"]) == (
        "gradient", "uniform", "paper", "fast", None)


# --------------------------------------------------------------------------- ppo by hand
#
# Row 0, A = +1, ratios [1.0, 1.5, 0.5, 1.1]; bounds [0.8, 1.2]:
#   J = [min(1,1)=1.0, min(1.5,1.2)=1.2 clip_high, min(.5,.8)=.5, 1.1]; sum 3.8
#   dJ/dlogp = A*r = [1.0, 0 (clipped), 0.5, 1.1]
# Row 1, A = -2, ratios [0.5, 1.5, 1.0, pad]:
#   J = [min(-1,-1.6)=-1.6 clip_low, min(-3,-2.4)=-3.0, -2.0]; sum -6.6
#   dJ/dlogp = [0 (clipped), -3.0 (A<0, r>c_high keeps it), -2.0]
# Sum J = -2.8 over N = 7 tokens.
PPO_R = [[1.0, 1.5, 0.5, 1.1], [0.5, 1.5, 1.0, 0.9]]
PPO_A = [1.0, -2.0]
PPO_M = [[True, True, True, True], [True, True, True, False]]
PPO_AR = [[1.0, 0.0, 0.5, 1.1], [0.0, -3.0, -2.0, 0.0]]


@pytest.mark.parametrize(
    ("aggregation", "loss", "scale"),
    [
        ("token-mean", 2.8 / 7, [[1 / 7] * 4, [1 / 7] * 4]),
        # -((3.8/4) + (-6.6/3)) / 2 = -(0.95 - 2.2) / 2 = 0.625
        ("seq-mean-token-mean", 0.625, [[1 / 8] * 4, [1 / 6] * 4]),
        # -(3.8 - 6.6) / (B*T = 8) = 0.35
        ("seq-mean-token-sum-norm", 0.35, [[1 / 8] * 4, [1 / 8] * 4]),
    ],
)
def test_ppo_by_hand(aggregation, loss, scale):
    out, grad = run("ppo", PPO_R, PPO_A, PPO_M, aggregation=aggregation)
    assert out.loss.item() == pytest.approx(loss, rel=1e-12)
    assert (out.c_low, out.c_high) == (0.8, 1.2)
    assert names(out.clip_state)[0] == ["none", "clip_high", "none", "none"]
    assert names(out.clip_state)[1][:3] == ["clip_low", "none", "none"]
    close(grad, -torch.tensor(PPO_AR, dtype=F64) * torch.tensor(scale, dtype=F64))
    assert grad[0, 1].item() == 0.0 and grad[1, 0].item() == 0.0  # clipped: exactly zero
    assert grad[1, 3].item() == 0.0  # padding
    # undo the aggregation: -grad / scale is A*r per token
    close(-grad / torch.tensor(scale, dtype=F64), PPO_AR)


def test_ppo_metrics_by_hand():
    out, _ = run("ppo", PPO_R, PPO_A, PPO_M)
    m = out.metrics
    assert (m["tokens_in_loss"], m["tokens_pos"], m["tokens_neg"], m["tokens_zero"]) == (7, 4, 3, 0)
    assert m["clip_frac"] == pytest.approx(2 / 7)
    assert m["clip_low_frac"] == pytest.approx(1 / 7)
    assert m["clip_high_frac"] == pytest.approx(1 / 7)
    assert m["dual_clip_frac"] == 0.0
    assert m["clip_frac_pos"] == pytest.approx(1 / 4)  # the r=1.5 positive
    assert m["clip_frac_neg"] == pytest.approx(1 / 3)  # the r=0.5 negative
    assert m["token_share_pos"] == pytest.approx(4 / 7)
    # gradient reading: sum over unclipped of |r*A|: pos 1.0+0.5+1.1, neg 3.0+2.0
    assert m["contrib_grad_pos"] == pytest.approx(2.6)
    assert m["contrib_grad_neg"] == pytest.approx(5.0)
    assert m["contrib_grad_pos_share"] == pytest.approx(2.6 / 7.6)
    assert m["rho"] == pytest.approx(2.6 / 7.6)
    # value reading: |sum of J| per sign: |1+1.2+.5+1.1| = 3.8, |-1.6-3-2| = 6.6
    assert m["contrib_value_pos"] == pytest.approx(3.8)
    assert m["contrib_value_neg"] == pytest.approx(6.6)
    assert m["contrib_value_pos_share"] == pytest.approx(3.8 / 10.4)
    rs = [1.0, 1.5, 0.5, 1.1, 0.5, 1.5, 1.0]
    assert m["ratio_mean"] == pytest.approx(sum(rs) / 7)
    assert m["kl_k3"] == pytest.approx(sum(r - 1 - math.log(r) for r in rs) / 7)
    assert m["abs_log_ratio_mean"] == pytest.approx(sum(abs(math.log(r)) for r in rs) / 7)
    # Cov(logp, A*X), X = 1 on gradient-carrying tokens (population covariance, 7 tokens)
    lp = [math.log(r) for r in rs]
    ax = [1.0, 0.0, 1.0, 1.0, 0.0, -2.0, -2.0]
    mx, my = sum(lp) / 7, sum(ax) / 7
    assert m["entropy_clip_cov"] == pytest.approx(
        sum((x - mx) * (y - my) for x, y in zip(lp, ax, strict=True)) / 7, rel=1e-12)
    assert m["zero_advantage"] is False
    assert m["entropy_mean"] is None
    assert (m["c_low"], m["c_high"], m["bapo_steps"]) == (0.8, 1.2, 0)


def test_ppo_dual_clip_by_hand():
    # bounds [0.8, 1.2], dual_clip_c = 3:
    #   A=-1, r=4: max(min(-4,-1.2), -3) = -3, state dual, no gradient
    #   A=-1, r=2: max(min(-2,-1.2), -3) = -2, none, dJ/dlogp = -2
    #   A=+1, r=4: min(4, 1.2) = 1.2, clip_high, no gradient
    #   A=+1, r=1: 1, none, dJ/dlogp = 1
    # sum J = -2.8, token mean over 4 -> loss 0.7
    out, grad = run("ppo", [[4.0, 2.0, 4.0, 1.0]], [[-1.0, -1.0, 1.0, 1.0]], dual_clip_c=3.0)
    assert out.loss.item() == pytest.approx(0.7, rel=1e-12)
    assert names(out.clip_state) == [["dual", "none", "clip_high", "none"]]
    close(grad, [[0.0, 2.0 / 4, 0.0, -1.0 / 4]])
    assert grad[0, 0].item() == 0.0
    m = out.metrics
    assert m["dual_clip_frac"] == pytest.approx(0.25)
    assert m["clip_high_frac"] == pytest.approx(0.25)
    assert m["clip_frac"] == pytest.approx(0.5)
    assert m["clip_frac_neg"] == pytest.approx(0.5)
    assert m["contrib_grad_neg"] == pytest.approx(2.0)  # the dual token carries none
    # value reading is min(rA, clip(r)A), without the dual branch: |-4 - 2| = 6
    assert m["contrib_value_neg"] == pytest.approx(6.0)


# ------------------------------------------------------------------- clip_higher by hand
#
# Row 0, A=+1, ratios [1.25, 1.3, 0.7]; row 1, A=-1, ratios [0.75, 1.25, 0.85].
# clip_higher [0.8, 1.28]:
#   row 0: J = [1.25 none, min(1.3,1.28)=1.28 clip_high, min(.7,.8)=.7 none]
#   row 1: J = [min(-.75,-.8)=-.8 clip_low, -1.25 none, -.85 none]
#   sum = 3.23 - 2.9 = 0.33 -> token mean over 6: loss = -0.055
# ppo [0.8, 1.2] on the same tokens: r=1.25, A>0 is now clipped (J=1.2):
#   sum = 1.2 + 1.2 + .7 - .8 - 1.25 - .85 = 0.2 -> loss = -0.2/6
CH_R = [[1.25, 1.3, 0.7], [0.75, 1.25, 0.85]]
CH_A = [1.0, -1.0]


def test_clip_higher_by_hand():
    out, grad = run("clip_higher", CH_R, CH_A)
    assert (out.c_low, out.c_high) == (0.8, 1.28)
    assert out.loss.item() == pytest.approx(-0.055, rel=1e-12)
    assert names(out.clip_state) == [["none", "clip_high", "none"], ["clip_low", "none", "none"]]
    close(-grad * 6, [[1.25, 0.0, 0.7], [0.0, -1.25, -0.85]])
    assert grad[0, 1].item() == 0.0 and grad[1, 0].item() == 0.0

    out, grad = run("ppo", CH_R, CH_A)
    assert out.loss.item() == pytest.approx(-0.2 / 6, rel=1e-12)
    assert names(out.clip_state) == [["clip_high", "clip_high", "none"],
                                     ["clip_low", "none", "none"]]
    close(-grad * 6, [[0.0, 0.0, 0.7], [0.0, -1.25, -0.85]])


# ------------------------------------------------------------------- top_entropy by hand
#
# [B=2, T=5], N = 10, q = 0.2 -> ceil(2) = 2 tokens kept:
#   entropy row 0 [0.1, 2.0, 0.3, 1.5, 0.2], row 1 [1.5, 0.4, 0.1, 1.0, 0.3]
#   highest: (0,1)=2.0; then a tie at 1.5 between (0,3) and (1,0): the earlier (0,3) wins.
# Row 0 has A=+1, ratios [1.0, 1.1, 0.9, 1.4, 1.0], bounds [0.8, 1.28]:
#   (0,1): J = 1.1, gradient 1.1; (0,3): J = min(1.4, 1.28) = 1.28, clip_high, no gradient
# token mean over the 2 kept tokens: loss = -(1.1 + 1.28)/2 = -1.19
TE_H = [[0.1, 2.0, 0.3, 1.5, 0.2], [1.5, 0.4, 0.1, 1.0, 0.3]]
TE_R = [[1.0, 1.1, 0.9, 1.4, 1.0], [1.0] * 5]
TE_A = [1.0, -1.0]


@pytest.mark.parametrize(
    ("aggregation", "loss", "scale"),
    [
        ("token-mean", -1.19, 1 / 2),
        # only row 0 bears loss: its token mean 2.38/2, averaged over 1 response
        ("seq-mean-token-mean", -1.19, 1 / 2),
        # 2.38 / (B*T = 10)
        ("seq-mean-token-sum-norm", -0.238, 1 / 10),
    ],
)
def test_top_entropy_by_hand(aggregation, loss, scale):
    logp, lb, m = make(TE_R)
    out = policy_loss("top_entropy", logp, lb, torch.tensor(TE_A, dtype=F64), m,
                      entropy=torch.tensor(TE_H), aggregation=aggregation)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(loss, rel=1e-12)
    assert out.in_loss.nonzero().tolist() == [[0, 1], [0, 3]]
    expected = torch.zeros(2, 5, dtype=F64)
    expected[0, 1] = -1.1 * scale
    close(logp.grad, expected)
    assert int((logp.grad != 0).sum()) == 1  # unselected and clipped tokens: exactly 0
    assert names(out.clip_state)[0][3] == "clip_high"
    mt = out.metrics
    assert (mt["tokens_in_loss"], mt["tokens_pos"], mt["tokens_neg"]) == (2, 2, 0)
    assert mt["clip_high_frac"] == pytest.approx(0.5)
    assert mt["entropy_mean"] == pytest.approx(sum(sum(r) for r in TE_H) / 10)


def test_top_entropy_selection_mask_override():
    # scope: rollout -- a precomputed selection; row 1 (A=-1, r=1) tokens 0 and 2 -> J = -1 each
    logp, lb, m = make(TE_R)
    sel = torch.zeros(2, 5, dtype=torch.bool)
    sel[1, 0] = sel[1, 2] = True
    out = policy_loss("top_entropy", logp, lb, torch.tensor(TE_A, dtype=F64), m, selection_mask=sel)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(1.0)
    assert torch.equal(out.in_loss, sel)
    expected = torch.zeros(2, 5, dtype=F64)
    expected[1, 0] = expected[1, 2] = 1.0 / 2  # -(A*r)/N = -(-1)/2
    close(logp.grad, expected)


# -------------------------------------------------------------------------- bapo by hand


def test_bapo_raises_c_high_by_hand():
    # A = [+1, +1, -1, -1], r = [1.33, 1.0, 1.0, 1.0], defaults (rho0 0.4, c_high step 0.05)
    # gradient reading: (0.6, 1.20): S_pos = 1 (1.33 clipped), S_neg = 2 -> rho 1/3 < 0.4
    #                   (0.6, 1.25), (0.6, 1.30): unchanged
    #                   (0.6, 1.35): S_pos = 2.33 -> rho = 2.33/4.33 = 0.538 >= 0.4, 3 steps
    # loss at [0.6, 1.35]: J = [1.33, 1, -1, -1], sum 0.33, N = 4 -> -0.0825
    out, grad = run("bapo", [[1.33, 1.0, 1.0, 1.0]], [[1.0, 1.0, -1.0, -1.0]])
    assert out.c_low == 0.6 and out.c_high == 1.2 + 3 * 0.05
    m = out.metrics
    assert (m["bapo_steps"], m["bapo_reached"], m["bapo_undefined"]) == (3, True, False)
    assert m["rho_before"] == pytest.approx(1 / 3)
    assert m["rho"] == pytest.approx(2.33 / 4.33)
    assert (m["c_low"], m["c_high"]) == (out.c_low, out.c_high)
    assert out.loss.item() == pytest.approx(-0.0825, rel=1e-12)
    close(-grad * 4, [[1.33, 1.0, -1.0, -1.0]])
    assert names(out.clip_state) == [["none"] * 4]
    # ppo on the same tokens clips the 1.33 positive: J = [1.2, 1, -1, -1] -> loss -0.05
    out, grad = run("ppo", [[1.33, 1.0, 1.0, 1.0]], [[1.0, 1.0, -1.0, -1.0]])
    assert out.loss.item() == pytest.approx(-0.05, rel=1e-12)
    assert grad[0, 0].item() == 0.0


@pytest.mark.parametrize("search", ["fast", "reference"])
def test_bapo_walks_c_high_to_its_max_then_raises_c_low_by_hand(search):
    # A = [+1, -1, -1, -1], r = [1.0, 0.65, 0.65, 1.0]
    # (0.6, c_high): S_pos = 1, S_neg = .65 + .65 + 1 = 2.3 -> rho = 1/3.3 for every c_high,
    # so c_high walks 1.20 -> 3.00 (36 steps); then c_low 0.62, 0.64 (0.65 still kept) and
    # 0.66 filters both 0.65 negatives: S_neg = 1 -> rho = 0.5 >= 0.4. 39 steps in all.
    # loss at [0.66, 3.0]: J = [1, min(-.65,-.66) = -.66 (x2, clip_low), -1] = -1.32 -> 0.33
    out, grad = run("bapo", [[1.0, 0.65, 0.65, 1.0]], [[1.0, -1.0, -1.0, -1.0]], search=search)
    assert out.c_low == 0.6 + 3 * 0.02
    assert out.c_high == 1.2 + 36 * 0.05
    m = out.metrics
    assert (m["bapo_steps"], m["bapo_reached"]) == (39, True)
    assert m["rho_before"] == pytest.approx(1 / 3.3)
    assert m["rho"] == pytest.approx(0.5)
    assert out.loss.item() == pytest.approx(0.33, rel=1e-12)
    assert names(out.clip_state) == [["none", "clip_low", "clip_low", "none"]]
    close(-grad * 4, [[1.0, 0.0, 0.0, -1.0]])
    assert grad[0, 1].item() == 0.0 and grad[0, 2].item() == 0.0


def test_bapo_official_order_value_reading_by_hand():
    # official recipe yaml: c_low [0.6, 0.8], c_high [1.2, 2.0], steps 0.05, target 0.5;
    # value reading; A = [1.05, -1, -1], r = [1.9, 0.5, 0.7]
    #   S_pos(c_high) = 1.05 * min(1.9, c_high); S_neg(c_low) = max(.5, c_low) + max(.7, c_low)
    #   start (0.6, 1.2): 1.26 / (1.26 + 1.3) = 0.4921875 < 0.5
    #   c_low first: .65 -> 1.35, .7 -> 1.4, .75 -> 1.5, .8 -> 1.6 (rho falls to 0.4406): 4 steps
    #   then c_high: 1.50 -> 1.575/3.175 = 0.496; 1.55 -> 1.6275/3.2275 = 0.50426 >= 0.5: 7 steps
    # loss at [0.8, 1.55]: J = [1.05*1.55 = 1.6275 clip_high, -0.8 clip_low, -0.8 clip_low]
    #   sum 0.0275 over 3 tokens; every token is clipped, so the gradient is exactly 0.
    params = dict(order="official", contribution="value", rho0=0.5, low_start=0.6, low_max=0.8,
                  high_start=1.2, high_max=2.0, low_step=0.05, high_step=0.05)
    out, grad = run("bapo", [[1.9, 0.5, 0.7]], [[1.05, -1.0, -1.0]], **params)
    assert out.c_low == 0.6 + 4 * 0.05 and out.c_high == 1.2 + 7 * 0.05
    m = out.metrics
    assert (m["bapo_steps"], m["bapo_reached"]) == (11, True)
    assert m["rho_before"] == pytest.approx(0.4921875)
    assert m["rho"] == pytest.approx(1.6275 / 3.2275)
    assert out.loss.item() == pytest.approx(-0.0275 / 3, rel=1e-10)
    assert names(out.clip_state) == [["clip_high", "clip_low", "clip_low"]]
    assert torch.equal(grad, torch.zeros_like(grad))


def test_bapo_rollout_prob_weights_by_hand():
    # A = [+1, +1, -1], r = [1.0, 1.32, 1.0], w = exp(logp_b) = [0.2, 0.8, 0.9]
    # uniform weights: S_pos = 1 (1.32 clipped at 1.2), S_neg = 1 -> rho 0.5: no step
    # rollout_prob: S_pos = 0.2, S_neg = 0.9 -> 0.18; at c_high 1.35 (3 steps) the 1.32
    #   token enters: S_pos = 0.2 + 0.8*1.32 = 1.256 -> 1.256/2.156 = 0.5826 >= 0.4
    # the weights change only the search, not the loss: J = [1, 1.32, -1] -> loss -1.32/3
    lb = [[math.log(0.2), math.log(0.8), math.log(0.9)]]
    out, _ = run("bapo", [[1.0, 1.32, 1.0]], [[1.0, 1.0, -1.0]], logp_behavior=lb)
    assert (out.c_high, out.metrics["bapo_steps"]) == (1.2, 0)
    assert out.metrics["rho"] == pytest.approx(0.5)
    out, grad = run("bapo", [[1.0, 1.32, 1.0]], [[1.0, 1.0, -1.0]], logp_behavior=lb,
                    weights="rollout_prob")
    assert out.c_high == 1.2 + 3 * 0.05 and out.metrics["bapo_steps"] == 3
    assert out.metrics["rho_before"] == pytest.approx(0.2 / 1.1)
    assert out.metrics["rho"] == pytest.approx(1.256 / 2.156)
    assert out.loss.item() == pytest.approx(-1.32 / 3, rel=1e-12)
    close(-grad * 3, [[1.0, 1.32, -1.0]])


def test_bapo_dual_clip_tokens_leave_rho():
    # A = [-1, +1, -1], r = [4, 1, 1], dual_clip_c = 3: the r=4 negative carries no gradient
    # whatever the bounds, so rho = 1 / (1 + 1) = 0.5 (not 1/(1 + 1 + 4)): no search step.
    out, _ = run("bapo", [[4.0, 1.0, 1.0]], [[-1.0, 1.0, -1.0]], dual_clip_c=3.0)
    assert out.metrics["rho"] == pytest.approx(0.5)
    assert out.metrics["bapo_steps"] == 0
    assert names(out.clip_state) == [["dual", "none", "none"]]


def test_bapo_all_signed_tokens_dual_clipped_is_rho_zero_not_an_error():
    # Every token has A != 0 and is dual-clipped: docs/methods.md says rho = 0 and the search
    # goes on (it walks the whole paper grid: 36 + 15 = 51 steps), not "undefined".
    # loss: J = max(min(rA, clip(r)A), 3A) = -3 for both -> token mean -3 -> loss 3
    out, grad = run("bapo", [[4.0, 5.0]], [[-1.0, -1.0]], dual_clip_c=3.0)
    m = out.metrics
    assert (m["rho"], m["bapo_steps"], m["bapo_reached"], m["bapo_undefined"]) == (0.0, 51, False, False)
    assert out.c_low == 0.6 + 15 * 0.02 and out.c_high == 1.2 + 36 * 0.05
    assert out.loss.item() == pytest.approx(3.0)
    assert torch.equal(grad, torch.zeros_like(grad))


# ------------------------------------------------------------- all-zero advantages


@pytest.mark.parametrize("method", ["ppo", "clip_higher", "top_entropy", "bapo"])
@pytest.mark.parametrize("aggregation", AGGS)
def test_all_zero_advantages_defined_and_flagged(method, aggregation):
    logp, lb, m = make([[1.3, 0.5, 1.0], [2.0, 0.9, 1.1]])
    out = policy_loss(method, logp, lb, torch.zeros(2, dtype=F64), m,
                      entropy=torch.rand(2, 3), aggregation=aggregation)
    out.loss.backward()
    assert out.loss.item() == 0.0 and not math.isnan(out.loss.item())
    assert torch.equal(logp.grad, torch.zeros_like(logp.grad))
    mt = out.metrics
    assert mt["zero_advantage"] is True
    assert mt["tokens_pos"] == mt["tokens_neg"] == 0
    assert mt["contrib_grad_pos_share"] is None and mt["clip_frac_pos"] is None
    for key, value in mt.items():
        assert not (isinstance(value, float) and math.isnan(value)), key
    if method == "bapo":
        assert mt["bapo_undefined"] is True and mt["bapo_reached"] is False
        assert (out.c_low, out.c_high, mt["bapo_steps"]) == (0.6, 1.2, 0)
        assert mt["rho"] is None and mt["rho_before"] is None


def test_padding_may_hold_anything():
    # NaN / inf in padded positions must not reach the loss or the gradient.
    def build(fill):
        logp = torch.tensor([[0.1, -0.2, fill], [0.3, fill, fill]], dtype=F64).requires_grad_()
        lb = torch.tensor([[0.0, 0.0, fill], [0.1, -fill, fill]], dtype=F64)
        adv = torch.tensor([[1.0, -1.0, fill], [2.0, fill, fill]], dtype=F64)
        mask = torch.tensor([[True, True, False], [True, False, False]])
        return logp, lb, adv, mask

    for method in ("ppo", "bapo", "top_entropy"):
        results = []
        for fill in (0.0, math.nan, math.inf):
            logp, lb, adv, mask = build(fill)
            out = policy_loss(method, logp, lb, adv, mask, entropy=torch.ones(2, 3))
            out.loss.backward()
            results.append((out.loss.detach(), logp.grad.clone()))
        for loss, grad in results[1:]:
            assert torch.equal(loss, results[0][0]), method
            assert torch.equal(grad, results[0][1]), method
            assert bool(torch.isfinite(grad).all())


# ----------------------------------------------------- random batches vs plain Python


def py_state(r, a, c_low, c_high, dual):
    if dual is not None and a < 0 and r > dual:
        return "dual"
    if a > 0 and r > c_high:
        return "clip_high"
    if a < 0 and r < c_low:
        return "clip_low"
    return "none"


def py_j(r, a, c_low, c_high, dual):
    j = min(r * a, min(max(r, c_low), c_high) * a)
    return max(j, dual * a) if dual is not None and a < 0 else j


def py_top_q(h, mask, q):
    idx = [i for i, m in enumerate(mask) if m]
    k = math.ceil(Decimal(repr(q)) * len(idx))
    return set(sorted(idx, key=lambda i: (-h[i], i))[:k])


@st.composite
def batches(draw, max_b=4, max_t=6):
    b, t = draw(st.integers(1, max_b)), draw(st.integers(1, max_t))
    n = b * t
    log_ratio = draw(st.lists(st.floats(-1.6, 1.6), min_size=n, max_size=n))
    lb = draw(st.lists(st.floats(-4.0, 0.0), min_size=n, max_size=n))
    values = st.sampled_from([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5])
    per_seq = draw(st.booleans())
    adv = draw(st.lists(values, min_size=b if per_seq else n, max_size=b if per_seq else n))
    mask = draw(st.lists(st.booleans(), min_size=n, max_size=n).filter(any))
    ent = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.5]), min_size=n, max_size=n))
    return b, t, log_ratio, lb, adv, per_seq, mask, ent


def tensors(batch):
    b, t, log_ratio, lb, adv, per_seq, mask, ent = batch
    lb_t = torch.tensor(lb, dtype=F64).view(b, t)
    logp = (torch.tensor(log_ratio, dtype=F64).view(b, t) + lb_t).requires_grad_()
    adv_t = torch.tensor(adv, dtype=F64).view(b if per_seq else (b, t))
    return logp, lb_t, adv_t, torch.tensor(mask).view(b, t), torch.tensor(ent).view(b, t)


METHOD_CASES = [
    ("ppo", {}), ("clip_higher", {}), ("top_entropy", {}), ("top_entropy", {"q": 0.5}),
    ("bapo", {}), ("bapo", {"contribution": "value", "order": "official"}),
    ("bapo", {"weights": "rollout_prob", "rho0": 0.6}),
]


@settings(max_examples=150, deadline=None)
@given(batches(), st.sampled_from(METHOD_CASES), st.sampled_from(AGGS),
       st.sampled_from([None, 2.0]))
def test_loss_gradient_states_and_metrics_match_python(batch, case, aggregation, dual):
    method, params = case
    b, t = batch[0], batch[1]
    logp, lb, adv, mask, ent = tensors(batch)
    out = policy_loss(method, logp, lb, adv, mask, entropy=ent, aggregation=aggregation,
                      dual_clip_c=dual, **params)
    out.loss.backward()
    c_low, c_high = out.c_low, out.c_high
    if method != "bapo":
        defaults = METHOD_DEFAULTS[method]
        assert (c_low, c_high) == (defaults["c_low"], defaults["c_high"])

    flat_lp = logp.detach().view(-1).tolist()
    flat_lb = lb.view(-1).tolist()
    flat_a = adv.view(-1).tolist() if adv.dim() == 2 else [x for x in adv.tolist() for _ in range(t)]
    flat_m = mask.view(-1).tolist()
    r = [math.exp(x - y) if m else 1.0 for x, y, m in zip(flat_lp, flat_lb, flat_m, strict=True)]
    a = [x if m else 0.0 for x, m in zip(flat_a, flat_m, strict=True)]
    if method == "top_entropy":
        keep = py_top_q(ent.view(-1).tolist(), flat_m, params.get("q", 0.2))
        in_loss = [i in keep for i in range(b * t)]
    else:
        in_loss = flat_m
    assert out.in_loss.view(-1).tolist() == in_loss

    states = [py_state(r[i], a[i], c_low, c_high, dual) for i in range(b * t)]
    lib_states = [CLIP_STATES[s] for s in out.clip_state.view(-1).tolist()]
    assert [s for s, m in zip(lib_states, flat_m, strict=True) if m] == \
        [s for s, m in zip(states, flat_m, strict=True) if m]

    # aggregation weight of each token, and the loss, from plain Python
    j = [py_j(r[i], a[i], c_low, c_high, dual) for i in range(b * t)]
    n_in = sum(in_loss)
    rows = [[i for i in range(k * t, (k + 1) * t) if in_loss[i]] for k in range(b)]
    if aggregation == "token-mean":
        scale = [1.0 / n_in] * (b * t)
    elif aggregation == "seq-mean-token-mean":
        bearing = sum(1 for row in rows if row)
        scale = [1.0 / (bearing * len(rows[i // t])) if rows[i // t] else 0.0
                 for i in range(b * t)]
    else:
        scale = [1.0 / (b * t)] * (b * t)
    loss = -sum(j[i] * scale[i] for i in range(b * t) if in_loss[i])
    assert out.loss.item() == pytest.approx(loss, rel=1e-9, abs=1e-12)

    grad = logp.grad.view(-1).tolist()
    for i in range(b * t):
        if not in_loss[i] or states[i] != "none":
            assert grad[i] == 0.0, (i, states[i])  # exactly zero on clipped / unselected
        else:
            # undo the aggregation: -grad / scale = dJ/dlogp = A * r
            assert -grad[i] / scale[i] == pytest.approx(a[i] * r[i], rel=1e-9, abs=1e-12)

    mt = out.metrics
    idx = [i for i in range(b * t) if in_loss[i]]
    pos = [i for i in idx if a[i] > 0]
    neg = [i for i in idx if a[i] < 0]
    assert (mt["tokens_in_loss"], mt["tokens_pos"], mt["tokens_neg"]) == (n_in, len(pos), len(neg))
    for kind in ("clip_low", "clip_high", "dual"):
        key = "dual_clip_frac" if kind == "dual" else f"{kind}_frac"
        assert mt[key] == pytest.approx(sum(states[i] == kind for i in idx) / n_in)
    for sign, members in (("pos", pos), ("neg", neg)):
        clipped = sum(states[i] != "none" for i in members)
        expected = clipped / len(members) if members else None
        assert mt[f"clip_frac_{sign}"] == pytest.approx(expected)
        # gradient reading: sum over unclipped of |r*A|
        grad_sum = sum(abs(r[i] * a[i]) for i in members if states[i] == "none")
        assert mt[f"contrib_grad_{sign}"] == pytest.approx(grad_sum, rel=1e-9, abs=1e-12)
        # value reading: |sum of min(rA, clip(r)A)| (no dual branch)
        value_sum = abs(sum(py_j(r[i], a[i], c_low, c_high, None) for i in members))
        assert mt[f"contrib_value_{sign}"] == pytest.approx(value_sum, rel=1e-9, abs=1e-12)
    # Cov(logp, A*X) over the response tokens, X = 1 iff the token carries gradient
    midx = [i for i in range(b * t) if flat_m[i]]
    xs = [flat_lp[i] for i in midx]
    ys = [a[i] * (in_loss[i] and states[i] == "none") for i in midx]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / len(xs)
    assert mt["entropy_clip_cov"] == pytest.approx(cov, rel=1e-9, abs=1e-12)
    assert mt["zero_advantage"] == (not pos and not neg)


# ------------------------------------------------ every ratio 1: ppo = clip_higher = bapo


@settings(max_examples=100, deadline=None)
@given(batches(), st.sampled_from(AGGS),
       st.sampled_from([{}, {"contribution": "value", "order": "official", "rho0": 0.5},
                        {"rho0": 0.9, "weights": "rollout_prob"}]))
def test_on_policy_ratios_make_ppo_clip_higher_bapo_identical(batch, aggregation, bapo_params):
    results = {}
    for method in ("ppo", "clip_higher", "bapo"):
        logp, lb, adv, mask, _ = tensors(batch)
        logp = lb.clone().requires_grad_()  # logp == logp_behavior: every ratio is exactly 1
        params = bapo_params if method == "bapo" else {}
        out = policy_loss(method, logp, lb, adv, mask, aggregation=aggregation, **params)
        out.loss.backward()
        assert bool((out.ratio[mask] == 1.0).all())
        assert bool((out.clip_state == 0).all())
        results[method] = (out.loss.detach(), logp.grad)
    for method in ("clip_higher", "bapo"):
        assert torch.equal(results[method][0], results["ppo"][0])
        assert torch.equal(results[method][1], results["ppo"][1])
