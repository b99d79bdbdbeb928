"""The mismatch corrections equal verl's and TRL's code (transcribed in verl_rollout_corr.py
and trl_is.py): weights, rejection masks, metrics, and the loss and gradient of an update
through the trainer, whole or micro-batched."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from src.corrections import build_correction, offpolicy_metrics, rs_options
from src.minibatches import MiniBatch, corrected
from src.policy import response_logprobs
from src.trainer import Trainer
from tests.conftest import compose
from tests.corrections import trl_is
from tests.corrections import verl_rollout_corr as verl
from tests.tiny_policy import B, tiny_model, tiny_rollout

N, T = 12, 9
# A threshold per rejection option that keeps some of this data and rejects some of it
# (checked below on verl's own mask), so every comparison sees both outcomes.
RS_THRESHOLDS = {
    "token_k1": "0.8_1.25", "token_k2": 0.02, "token_k3": 0.02,
    "seq_sum_k1": "0.5_2.0", "seq_sum_k2": 0.25, "seq_sum_k3": 0.25,
    "seq_mean_k1": "0.9_1.1", "seq_mean_k2": 0.04, "seq_mean_k3": 0.04,
    "seq_max_k2": 0.15, "seq_max_k3": 0.15,
}


@pytest.fixture(scope="module")
def batch():
    """Trainer and sampler log-probs [N, T] over a ragged mask: log-ratios ~ N(0, 0.3), so
    token weights spread around 1 and sequence products spread well past 2."""
    gen = torch.Generator().manual_seed(5)
    logp_old = -torch.rand(N, T, generator=gen) * 3
    logp_sampler = logp_old - 0.3 * torch.randn(N, T, generator=gen)
    lengths = torch.tensor([9, 3, 7, 1, 9, 5, 6, 8, 2, 9, 4, 7])
    mask = torch.arange(T)[None, :] < lengths[:, None]
    return logp_old, logp_sampler, mask


def _section(**keys):
    base = {"rollout_is": None, "rollout_is_threshold": 2.0, "rollout_is_batch_normalize": False,
            "rollout_rs": None, "rollout_rs_threshold": None, "bypass_mode": False}
    return type("Section", (), {**base, **keys})


def _assert_metrics_equal(ours: dict, theirs: dict) -> None:
    assert ours, "no metrics"
    for key, value in ours.items():
        other = theirs[key.removeprefix("rollout_corr/")]
        other = float(other.item() if isinstance(other, torch.Tensor) else other)
        assert math.isclose(value, other, rel_tol=1e-6, abs_tol=1e-6), (key, value, other)


def test_every_verl_rejection_option_is_registered():
    assert sorted(rs_options()) == sorted(verl.SUPPORTED_ROLLOUT_RS_OPTIONS)


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_is_weights_and_metrics_equal_verl(batch, level, normalize):
    logp_old, logp_sampler, mask = batch
    threshold = 1.2 if level == "token" else 2.0
    ours = build_correction(_section(rollout_is=level, rollout_is_threshold=threshold,
                                     rollout_is_batch_normalize=normalize)).apply(logp_old, logp_sampler, mask)
    weights, metrics = verl.compute_rollout_correction_weights(
        logp_old - logp_sampler, mask.float(), rollout_is=level, rollout_is_threshold=threshold,
        rollout_is_batch_normalize=normalize)
    assert torch.allclose(ours.weight, weights, rtol=1e-6, atol=1e-7)
    assert 0 < float(metrics["rollout_is_ratio_fraction_high"]) < 1  # some truncated, some not
    _assert_metrics_equal(ours.metrics, metrics)
    assert ours.keep.equal(mask)  # IS alone rejects nothing


@pytest.mark.parametrize("option", sorted(RS_THRESHOLDS))
def test_each_rejection_option_equals_verl(batch, option):
    logp_old, logp_sampler, mask = batch
    spec = RS_THRESHOLDS[option]
    ours = build_correction(_section(rollout_rs=option, rollout_rs_threshold=spec)).apply(
        logp_old, logp_sampler, mask)
    kept, metrics = verl.compute_rollout_rejection_mask(logp_old - logp_sampler, mask.float(),
                                                        rollout_rs=option, rollout_rs_threshold=spec)
    kept = kept.bool()
    assert kept[mask].any() and not kept[mask].all(), "the threshold must keep some and reject some"
    assert ours.weight is None and ours.keep.equal(kept)
    _assert_metrics_equal(ours.metrics, metrics)


def test_several_rejection_options_and_one_threshold_each_equal_verl(batch):
    logp_old, logp_sampler, mask = batch
    options, specs = "token_k1,seq_mean_k3,seq_max_k2", "0.7_1.4,0.04,0.15"
    ours = build_correction(_section(rollout_is="sequence", rollout_is_threshold=2.0, rollout_rs=options,
                                     rollout_rs_threshold=specs)).apply(logp_old, logp_sampler, mask)
    kept, metrics = verl.compute_rollout_rejection_mask(logp_old - logp_sampler, mask.float(),
                                                        rollout_rs=options, rollout_rs_threshold=specs)
    assert ours.keep.equal(kept.bool())
    _assert_metrics_equal({k: v for k, v in ours.metrics.items() if k.startswith("rollout_rs")}, metrics)


def test_one_number_bounds_a_k1_ratio_both_ways_as_verl(batch):
    """A k1 option given one number u keeps ratios in [1/u, u] (verl's reading)."""
    logp_old, logp_sampler, mask = batch
    ours = build_correction(_section(rollout_rs="token_k1", rollout_rs_threshold=1.3)).apply(
        logp_old, logp_sampler, mask)
    kept, _ = verl.compute_rollout_rejection_mask(logp_old - logp_sampler, mask.float(),
                                                  rollout_rs="token_k1", rollout_rs_threshold=1.3)
    assert ours.keep.equal(kept.bool())
    ratio = (logp_old - logp_sampler).exp()
    assert ours.keep.equal(mask & (ratio >= 1 / 1.3) & (ratio <= 1.3))  # by hand, to rounding


def test_offpolicy_metrics_equal_verl(batch):
    logp_old, logp_sampler, mask = batch
    _assert_metrics_equal(offpolicy_metrics(logp_old, logp_sampler, mask),
                          verl.compute_offpolicy_metrics(logp_old, logp_sampler, mask.float()))


@pytest.mark.parametrize(("mode", "rollout_is", "threshold"), [
    ("token_truncate", "token", 1.2), ("sequence_truncate", "sequence", 3.0),
    ("token_mask", "token", "0_1.2"), ("sequence_mask", "sequence", "0_3.0"),
])
def test_trl_modes_are_verl_keys(batch, mode, rollout_is, threshold):
    """TRL's four modes (clip_min None) in verl's keys: a number truncates, 'lo_hi' masks."""
    logp_old, logp_sampler, mask = batch
    ours = build_correction(_section(rollout_is=rollout_is, rollout_is_threshold=threshold)).apply(
        logp_old, logp_sampler, mask)
    cap = float(str(threshold).split("_")[-1])
    theirs = trl_is.vllm_importance_sampling_ratio(logp_old, logp_sampler, mask.float(),
                                                   vllm_importance_sampling_mode=mode,
                                                   vllm_importance_sampling_clip_max=cap)
    theirs = theirs.expand_as(logp_old)
    assert torch.allclose(ours.weight[mask], theirs[mask], rtol=1e-6, atol=1e-7)
    if mode.endswith("mask"):
        assert (theirs[mask] == 0).any() and (theirs[mask] > 0).any()


def test_the_trl_default_preset_is_trls_default(batch):
    from omegaconf import OmegaConf

    from src.config import CorrectionConfig
    from tests.conftest import REPO

    preset = OmegaConf.merge(OmegaConf.structured(CorrectionConfig),
                             OmegaConf.load(REPO / "conf" / "correction" / "trl_default.yaml"))
    logp_old, logp_sampler, mask = batch
    ours = build_correction(preset).apply(logp_old, logp_sampler, mask)
    theirs = trl_is.vllm_importance_sampling_ratio(logp_old, logp_sampler, mask.float()).expand_as(logp_old)
    assert torch.allclose(ours.weight[mask], theirs[mask], rtol=1e-6, atol=1e-7)


# -- the loss and gradient of an update, through the trainer ---------------------------------

ADVANTAGES = torch.tensor([1.0, -1.0, -1.2, -0.5, 0.6, -1.5, -0.8, 0.3])


@pytest.fixture(scope="module")
def update_setup():
    """A tiny model, a mini-batch, behaviour log-probs of perturbed weights (ratios spread
    over the clip) and sampler log-probs a bit off the behaviour's (the mismatch)."""
    torch.set_num_threads(1)
    model = tiny_model()
    behaviour = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in behaviour.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
        data = tiny_rollout()
        logp_b, ent_b = response_logprobs(behaviour, data)
    data.sampler_logp = torch.where(data.response_mask,
                                    logp_b + 0.4 * torch.randn(logp_b.shape, generator=gen), 0.0)
    return model, data, logp_b, ent_b


@pytest.mark.parametrize("micro", [None, 2])
@pytest.mark.parametrize("preset", ["tis", "seq_mis", "icepop"])
def test_update_gradient_equals_verls_corrected_loss(update_setup, preset, micro):
    model, data, logp_b, ent_b = update_setup
    cfg = compose([f"correction={preset}", "method=ppo", "method.ppo.dual_clip_c=3.0",
                   "train.prompts_per_step=2", "train.group_size=4", "rollout.max_new_tokens=12"])
    cfg.train.micro_batch_size = micro
    trainer = Trainer(cfg, model, None, None, None, None, None, None, None)
    mb = MiniBatch(torch.arange(B), data, logp_b, ent_b, ADVANTAGES.clone(), torch.zeros(B))
    (mb,) = corrected(trainer.correction, [mb])
    model.zero_grad(set_to_none=True)
    done = trainer.update.gradient(mb, seed=0)
    ours = [p.grad.detach().clone() for p in model.parameters()]

    mask = data.response_mask.float()
    log_ratio = logp_b - data.sampler_logp
    c = cfg.correction
    weights = None
    if c.rollout_is is not None and "_" not in str(c.rollout_is_threshold):
        weights, _ = verl.compute_rollout_correction_weights(log_ratio, mask, c.rollout_is,
                                                             c.rollout_is_threshold)
    elif c.rollout_is is not None:  # IcePop: verl's weight, zero outside [lo, hi]
        lo, hi = (float(x) for x in c.rollout_is_threshold.split("_"))
        raw = torch.exp(log_ratio.clamp(-20, 20)) * mask
        weights = raw.masked_fill((raw < lo) | (raw > hi), 0.0)
    if c.rollout_rs is not None:
        mask, _ = verl.compute_rollout_rejection_mask(log_ratio, mask, c.rollout_rs, c.rollout_rs_threshold)
    assert 0 < float(mask.sum()) <= float(data.response_mask.sum())
    model.zero_grad(set_to_none=True)
    logp, _ = response_logprobs(model, data)
    adv = ADVANTAGES[:, None].expand_as(logp)
    loss = verl.compute_policy_loss_vanilla(logp_b, logp, adv, mask, clip_ratio_low=0.2,
                                            clip_ratio_high=0.2, clip_ratio_c=3.0,
                                            rollout_is_weights=weights)
    loss.backward()
    assert math.isclose(float(done.out.loss.detach()), float(loss.detach()), rel_tol=1e-6, abs_tol=1e-7)
    for g, h in zip(ours, [p.grad for p in model.parameters()], strict=True):
        assert torch.allclose(g, h, rtol=1e-5, atol=1e-6 * float(h.abs().max()))
    if weights is not None:  # the weight moved the loss away from the uncorrected one
        plain = verl.compute_policy_loss_vanilla(logp_b, logp.detach(), adv, mask, clip_ratio_low=0.2,
                                                 clip_ratio_high=0.2, clip_ratio_c=3.0)
        assert abs(float(plain) - float(loss.detach())) > 1e-4


def test_bypass_takes_the_ratio_against_the_sampler(update_setup):
    model, data, logp_b, ent_b = update_setup
    cfg = compose(["correction.bypass_mode=true", "method=ppo", "train.prompts_per_step=2",
                   "train.group_size=4", "rollout.max_new_tokens=12"])
    trainer = Trainer(cfg, model, None, None, None, None, None, None, None)
    mb = MiniBatch(torch.arange(B), data, logp_b, ent_b, ADVANTAGES.clone(), torch.zeros(B))
    (mb,) = corrected(trainer.correction, [mb])
    done = trainer.update.gradient(mb, seed=0)
    with torch.no_grad():
        logp, _ = response_logprobs(model, data)
    expected = (logp - data.sampler_logp).exp()
    m = data.response_mask
    assert torch.allclose(done.out.ratio[m], expected[m], rtol=1e-6)
    assert mb.is_weight is None and mb.loss_mask.equal(m)
