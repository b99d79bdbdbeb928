"""Bad input gets a clear ValueError that names the offending argument."""

from __future__ import annotations

import math

import pytest
import torch

from src.algorithms import adaptive_bounds, adaptive_bounds_reference, policy_loss

F64 = torch.float64
METHODS4 = ["ppo", "clip_higher", "top_entropy", "bapo"]
SEARCHES = [adaptive_bounds, adaptive_bounds_reference]


def inputs(b=2, t=3):
    logp = torch.full((b, t), -1.0, dtype=F64, requires_grad=True)
    lb = torch.full((b, t), -1.1, dtype=F64)
    adv = torch.tensor([1.0, -1.0], dtype=F64)[:b]
    mask = torch.ones(b, t, dtype=torch.bool)
    entropy = torch.ones(b, t)
    return logp, lb, adv, mask, entropy


def call(method, logp, lb, adv, mask, entropy, **params):
    return policy_loss(method, logp, lb, adv, mask, entropy=entropy, **params)


# --------------------------------------------------------------------------- shapes


@pytest.mark.parametrize("method", METHODS4)
def test_logp_behavior_shape_mismatch(method):
    logp, lb, adv, mask, ent = inputs()
    with pytest.raises(ValueError, match=r"logp_behavior has shape \(2, 4\)"):
        call(method, logp, torch.zeros(2, 4, dtype=F64), adv, mask, ent)


@pytest.mark.parametrize("method", METHODS4)
def test_mask_shape_mismatch(method):
    logp, lb, adv, mask, ent = inputs()
    with pytest.raises(ValueError, match=r"mask has shape \(2, 4\)"):
        call(method, logp, lb, adv, torch.ones(2, 4, dtype=torch.bool), ent)


@pytest.mark.parametrize("method", METHODS4)
@pytest.mark.parametrize("shape", [(3,), (2, 4), (6,)])
def test_advantages_shape_mismatch(method, shape):
    logp, lb, adv, mask, ent = inputs()
    with pytest.raises(ValueError, match=r"advantages has shape"):
        call(method, logp, lb, torch.ones(shape, dtype=F64), mask, ent)


def test_entropy_and_selection_mask_shape_mismatch():
    logp, lb, adv, mask, ent = inputs()
    with pytest.raises(ValueError, match=r"entropy has shape \(2, 4\)"):
        call("top_entropy", logp, lb, adv, mask, torch.ones(2, 4))
    with pytest.raises(ValueError, match=r"selection_mask has shape \(2, 4\)"):
        call("top_entropy", logp, lb, adv, mask, None,
             selection_mask=torch.ones(2, 4, dtype=torch.bool))


@pytest.mark.parametrize("fn", SEARCHES)
def test_search_shape_errors(fn):
    r = torch.ones(2, 3, dtype=F64)
    with pytest.raises(ValueError, match=r"mask has shape \(3,\)"):
        fn(r, torch.ones(2), torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="advantages has shape"):
        fn(r, torch.ones(3), torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="weights has shape"):
        fn(r, torch.ones(2), torch.ones(2, 3, dtype=torch.bool), weights=torch.ones(3))


# ----------------------------------------------------------------------- empty mask


@pytest.mark.parametrize("method", METHODS4)
def test_empty_mask(method):
    logp, lb, adv, mask, ent = inputs()
    with pytest.raises(ValueError, match="mask selects no tokens"):
        call(method, logp, lb, adv, torch.zeros_like(mask), ent)


@pytest.mark.parametrize("fn", SEARCHES)
def test_search_empty_mask(fn):
    with pytest.raises(ValueError, match="mask selects no tokens"):
        fn(torch.ones(3), torch.ones(3), torch.zeros(3, dtype=torch.bool))


# ----------------------------------------------------------------- non-finite values


@pytest.mark.parametrize("method", METHODS4)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("which", ["logp", "logp_behavior", "advantages"])
def test_non_finite_inputs_named(method, bad, which):
    logp, lb, adv, mask, ent = inputs()
    if which == "logp":
        logp = logp.detach().clone()
        logp[1, 2] = bad
        logp.requires_grad_()
    elif which == "logp_behavior":
        lb[0, 1] = bad
    else:
        adv = adv.clone()
        adv[1] = bad
    with pytest.raises(ValueError, match=rf"^{which} has \d+ non-finite value"):
        call(method, logp, lb, adv, mask, ent)


def test_non_finite_entropy_named():
    logp, lb, adv, mask, ent = inputs()
    ent[0, 0] = math.nan
    with pytest.raises(ValueError, match=r"^entropy has 1 non-finite"):
        call("top_entropy", logp, lb, adv, mask, ent)


@pytest.mark.parametrize("fn", SEARCHES)
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_search_non_finite_ratio_and_advantages(fn, bad):
    m = torch.ones(3, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"^ratio has 1 non-finite"):
        fn(torch.tensor([1.0, bad, 1.0]), torch.ones(3), m)
    with pytest.raises(ValueError, match=r"^advantages has 1 non-finite"):
        fn(torch.ones(3), torch.tensor([1.0, 1.0, bad]), m)


def test_non_finite_values_in_padding_are_allowed():
    logp, lb, adv, mask, ent = inputs()
    mask[1, 2] = False
    lb[1, 2] = math.nan
    out = call("bapo", logp, lb, adv, mask, ent)
    assert math.isfinite(out.loss.item())


# ------------------------------------------------------------------ bad parameters


@pytest.mark.parametrize("q", [0.0, -0.2, 1.2, math.nan])
def test_top_entropy_q_outside_unit_interval(q):
    logp, lb, adv, mask, ent = inputs()
    with pytest.raises(ValueError, match=r"^q must be in \(0, 1\]"):
        call("top_entropy", logp, lb, adv, mask, ent, q=q)


def test_top_entropy_needs_entropy():
    logp, lb, adv, mask, _ = inputs()
    with pytest.raises(ValueError, match="top_entropy needs entropy="):
        call("top_entropy", logp, lb, adv, mask, None)


@pytest.mark.parametrize("method", ["ppo", "clip_higher", "top_entropy"])
@pytest.mark.parametrize(("c_low", "c_high"), [(1.2, 0.8), (1.0, 1.0), (-0.1, 1.2)])
def test_fixed_bounds_out_of_order(method, c_low, c_high):
    logp, lb, adv, mask, ent = inputs()
    with pytest.raises(ValueError, match=r"need 0 <= c_low < c_high"):
        call(method, logp, lb, adv, mask, ent, c_low=c_low, c_high=c_high)


@pytest.mark.parametrize("method", METHODS4)
@pytest.mark.parametrize("dual_clip_c", [1.0, 0.5])
def test_dual_clip_c_must_exceed_one(method, dual_clip_c):
    logp, lb, adv, mask, ent = inputs()
    with pytest.raises(ValueError, match="dual_clip_c must be > 1"):
        call(method, logp, lb, adv, mask, ent, dual_clip_c=dual_clip_c)


@pytest.mark.parametrize("method", METHODS4)
def test_unknown_aggregation(method):
    logp, lb, adv, mask, ent = inputs()
    with pytest.raises(ValueError, match="aggregation must be one of"):
        call(method, logp, lb, adv, mask, ent, aggregation="mean")


def test_unknown_method():
    logp, lb, adv, mask, ent = inputs()
    with pytest.raises(ValueError, match="unknown method 'grpo'"):
        call("grpo", logp, lb, adv, mask, ent)


BAD_SEARCH_PARAMS = [
    ({"rho0": 0.0}, r"^rho0 must be in \(0, 1\)"),
    ({"rho0": 1.0}, r"^rho0 must be in \(0, 1\)"),
    ({"rho0": -0.4}, r"^rho0 must be in \(0, 1\)"),
    ({"rho0": math.nan}, r"^rho0 must be in \(0, 1\)"),
    ({"low_start": 0.95}, "low_start <= low_max"),
    ({"low_start": 0.0}, "0 < low_start"),
    ({"high_start": 3.5}, "high_start <= high_max"),
    ({"low_max": 1.3}, "low_max < high_start"),
    ({"high_step": 0.0}, "high_step and low_step must be > 0"),
    ({"low_step": -0.02}, "high_step and low_step must be > 0"),
    ({"contribution": "magnitude"}, "^contribution must be one of"),
    ({"order": "dapo"}, "^order must be one of"),
    ({"weights": "prob"}, "^weights must be"),
    ({"weights": "rollout_prob"}, "needs logp_behavior="),
]


@pytest.mark.parametrize("fn", SEARCHES)
@pytest.mark.parametrize(("params", "match"), BAD_SEARCH_PARAMS)
def test_search_bad_parameters(fn, params, match):
    with pytest.raises(ValueError, match=match):
        fn(torch.tensor([1.3, 0.7]), torch.tensor([1.0, -1.0]), torch.ones(2, dtype=torch.bool),
           **params)


@pytest.mark.parametrize(("params", "match"), [
    *[case for case in BAD_SEARCH_PARAMS if "weights" not in case[0]],
    ({"weights": "prob"}, "^weights must be"),
    ({"search": "bisect"}, "^search must be 'fast' or 'reference'"),
    ({"low_start": 1.3}, r"need 0 <= c_low < c_high"),
])
def test_bapo_bad_parameters(params, match):
    logp, lb, adv, mask, ent = inputs()
    with pytest.raises(ValueError, match=match):
        call("bapo", logp, lb, adv, mask, ent, **params)


def test_contribution_functions_reject_unknown_reading():
    from src.algorithms import contribution_sums, positive_contribution
    for fn in (contribution_sums, positive_contribution):
        with pytest.raises(ValueError, match="^contribution must be one of"):
            fn(torch.ones(2), torch.ones(2), torch.ones(2, dtype=torch.bool), 0.8, 1.2,
               contribution="both")
