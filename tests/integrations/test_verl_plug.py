"""verl plug: the project's objectives as verl policy losses.

Two layers:
- the adapter against verl's documented signature (runs without verl): loss and metrics
  equal `src.algorithms.policy_loss`, verl's micro-batch weighting, both return forms;
- with verl installed (CPU): the losses sit in verl's own registry, ppo / clip_higher equal
  verl's `vanilla` loss on the same batch, and verl's engine loss `ppo_loss` feeds
  top_entropy its entropies through the pass-through.
"""

from __future__ import annotations

import zlib

import pytest
import torch

from src.algorithms import METHODS, policy_loss
from src.integrations.verl_losses import entropy_context, make_policy_loss


def batch(seed=0, b=6, t=9, noise=0.4):
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(b, t, generator=g) * 3).requires_grad_()
    old = logp.detach() + noise * torch.randn(b, t, generator=g)
    adv = torch.randn(b, 1, generator=g).expand(b, t).contiguous()  # verl: per token
    mask = torch.ones(b, t)
    mask[1, 5:] = 0
    mask[4, 2:] = 0
    entropy = torch.rand(b, t, generator=g) * 2
    return old, logp, adv, mask, entropy


def call(fn, old, logp, adv, mask, config=None, mode="token-mean", **kw):
    # Keyword call, exactly as verl's ppo_loss calls a registered policy loss.
    return fn(old_log_prob=old, log_prob=logp, advantages=adv, response_mask=mask,
              loss_agg_mode=mode, config=config, rollout_is_weights=None, **kw)


@pytest.mark.parametrize("method", sorted({"bapo_official", *METHODS}))  # every registered method
def test_adapter_is_the_project_objective(method):
    old, logp, adv, mask, ent = batch()
    from src.integrations._common import resolve_method
    resolved = resolve_method(method)
    objective = resolved.objective
    assert objective == method or method == "bapo_official"
    # verl's loss_agg_mode is the aggregation; random draws (clip_cov) are seeded by a
    # checksum of the behaviour log-probs
    params = dict(resolved.params, norm_length=logp.shape[-1], aggregation="token-mean",
                  seed=zlib.crc32(old.detach().float().numpy().tobytes()))
    ref = policy_loss(objective, logp, old, adv, mask.bool(), entropy=ent, **params)
    with entropy_context(ent):
        loss, metrics = call(make_policy_loss(method, returns="dict"), old, logp, adv, mask)
    assert torch.equal(loss, ref.loss)
    # bounds a method does not have (m2po, kl_cov) are left out of verl's float metrics
    assert metrics.get("actor/repro/c_low") == ref.c_low
    assert metrics.get("actor/repro/c_high") == ref.c_high
    assert metrics["actor/pg_clipfrac"] == ref.metrics["clip_frac"]
    assert all(isinstance(v, float) for v in metrics.values())
    loss.backward()
    assert logp.grad is not None and torch.isfinite(logp.grad).all()


def test_micro_batches_add_up_to_the_minibatch_loss():
    # verl sums micro-batch losses (each normalised by global counts) within a mini-batch.
    old, logp, adv, mask, _ = batch(b=8)
    fn = make_policy_loss("clip_higher", returns="dict")
    full, _ = call(fn, old, logp, adv, mask)
    info = {"dp_size": 1, "batch_num_tokens": mask.sum(), "global_batch_size": 8}
    parts = [call(fn, old[s], logp[s], adv[s], mask[s], config={"global_batch_info": info})[0]
             for s in (slice(0, 3), slice(3, 8))]
    torch.testing.assert_close(sum(parts), full, rtol=1e-6, atol=1e-7)
    # Two data-parallel ranks, one micro-batch each: the mean over ranks is the loss.
    info2 = dict(info, dp_size=2)
    ranks = [call(fn, old[s], logp[s], adv[s], mask[s], config={"global_batch_info": info2})[0]
             for s in (slice(0, 4), slice(4, 8))]
    torch.testing.assert_close(sum(ranks) / 2, full, rtol=1e-6, atol=1e-7)
    # seq-mean-token-mean, weighted by sequences.
    full_seq, _ = call(fn, old, logp, adv, mask, mode="seq-mean-token-mean")
    parts = [call(fn, old[s], logp[s], adv[s], mask[s], mode="seq-mean-token-mean",
                  config={"global_batch_info": info})[0] for s in (slice(0, 3), slice(3, 8))]
    torch.testing.assert_close(sum(parts), full_seq, rtol=1e-6, atol=1e-7)


def test_tuple4_return_and_errors():
    old, logp, adv, mask, _ = batch()
    loss, clipfrac, kl, lower = call(make_policy_loss("ppo", returns="tuple4"), old, logp, adv, mask)
    assert loss.dim() == 0 and 0 < float(clipfrac) < 1 and float(lower) == 0.0
    fn = make_policy_loss("top_entropy")
    with pytest.raises(ValueError, match="calculate_entropy=True"):
        call(fn, old, logp, adv, mask)
    with pytest.raises(ValueError, match="rollout_is_weights"):
        fn(old, logp, adv, mask, "token-mean", None, torch.ones_like(logp))
    with pytest.raises(ValueError, match="loss_agg_mode='token-sum'"):
        call(make_policy_loss("ppo"), old, logp, adv, mask, mode="token-sum")
    with pytest.raises(ValueError, match="conf/method"):
        make_policy_loss("not_a_method")
    # An empty micro-batch is a zero loss that still reaches the graph.
    loss, metrics = call(make_policy_loss("bapo", returns="dict"), old, logp, adv,
                         torch.zeros_like(mask))
    assert float(loss) == 0.0 and metrics["actor/repro/skipped"] == 1.0
    loss.backward()


def test_method_overrides_from_the_config():
    old, logp, adv, mask, _ = batch()
    fn = make_policy_loss("bapo", returns="dict")
    config = {"policy_loss": {"method": {"bapo": {"high_start": 1.5, "high_max": 1.5}}}}
    _, metrics = call(fn, old, logp, adv, mask, config=config)
    assert metrics["actor/repro/c_high"] == 1.5


# -- with verl installed -----------------------------------------------------------------

def _verl():
    pytest.importorskip("ray")
    return pytest.importorskip("verl.trainer.ppo.core_algos")


def actor_config(loss_mode, method=None, **kw):
    from verl.workers.config import ActorConfig

    from src.integrations.verl_losses import ProjectPolicyLossConfig
    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=2,
                       policy_loss=ProjectPolicyLossConfig(loss_mode=loss_mode, method=method or {}),
                       **kw)


def test_registered_in_verls_registry():
    core = _verl()
    import src.integrations.verl_losses as plug
    for name in ("ppo", "clip_higher", "top_entropy", "bapo", "repro_bapo", "bapo_official"):
        assert core.get_policy_loss_fn(name) is not None
    # every method is registered with the prefix; under its own name unless verl has that
    # name for its own loss (verl's gspo, cispo, clip_cov, kl_cov stay verl's)
    for name in METHODS:
        ours = core.get_policy_loss_fn(f"repro_{name}")
        assert ours.__name__ == f"repro_policy_loss_{name}"
        own = core.get_policy_loss_fn(name)
        assert own is ours or not own.__name__.startswith("repro_")
    assert plug.RETURNS == "dict"
    old, logp, adv, mask, _ = batch()
    loss, metrics = call(core.get_policy_loss_fn("bapo"), old, logp, adv, mask.bool(),
                         config=actor_config("bapo"))
    loss.backward()
    assert 0.6 <= metrics["actor/repro/c_low"] <= 0.9 and metrics["actor/repro/bapo_steps"] >= 0


@pytest.mark.parametrize(("method", "eps_high", "dual"), [
    ("ppo", 0.2, None), ("clip_higher", 0.28, None), ("ppo", 0.2, 3.0), ("clip_higher", 0.28, 3.0)])
def test_equals_verl_vanilla(method, eps_high, dual, capsys):
    core = _verl()
    old, logp, adv, mask, _ = batch(noise=1.0)  # ratios up to ~e^3: dual clip active
    # verl's vanilla always dual-clips (clip_ratio_c); "off" = a constant no ratio reaches.
    cfg = actor_config(method, {method: {"dual_clip_c": dual}}, clip_ratio_low=0.2, clip_ratio_high=eps_high,
                       clip_ratio_c=dual or 1e6)
    ref, ref_m = call(core.get_policy_loss_fn("vanilla"), old, logp, adv, mask.bool(), config=cfg)
    (ref_grad,) = torch.autograd.grad(ref, logp)
    ours, m = call(core.get_policy_loss_fn(method), old, logp, adv, mask.bool(), config=cfg)
    (our_grad,) = torch.autograd.grad(ours, logp)
    with capsys.disabled():
        print(f"\n{method:12s} dual={dual}: verl vanilla={ref.item():+.9f} ours={ours.item():+.9f} "
              f"|d|={abs(ref - ours).item():.1e} max|dgrad|={(ref_grad - our_grad).abs().max().item():.1e}")
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(our_grad, ref_grad, rtol=1e-6, atol=1e-8)
    if dual:  # verl's pg_clipfrac_lower is the dual-clip fraction; the project calls it dual
        assert m["actor/pg_clipfrac_lower"] == pytest.approx(ref_m["actor/pg_clipfrac_lower"])
        assert m["actor/repro/dual_clip_frac"] > 0


def test_top_entropy_through_verls_engine_loss():
    _verl()
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils import losses

    import src.integrations.verl_losses as plug

    assert getattr(losses.ppo_loss, "__repro_entropy_passthrough__", False)
    old, logp, adv, mask, ent = batch(t=6)
    b, t = logp.shape
    p = 3  # prompt tokens, no padding; responses right-padded by their mask
    attention = torch.cat([torch.ones(b, p), mask], dim=1).long()
    nnz = int(attention.sum())
    # Flat (no-padding) model outputs: position i predicts token i+1, as verl's engine emits.
    flat_logp = torch.zeros(nnz)
    flat_ent = torch.zeros(nnz)
    offset = 0
    for i in range(b):
        n = int(mask[i].sum())
        flat_logp[offset + p - 1: offset + p - 1 + n] = logp.detach()[i, :n]
        flat_ent[offset + p - 1: offset + p - 1 + n] = ent[i, :n]
        offset += p + n
    flat_logp.requires_grad_()
    data = TensorDict({"prompts": torch.zeros(b, p, dtype=torch.long),
                       "responses": torch.zeros(b, t, dtype=torch.long),
                       "attention_mask": attention, "response_mask": mask.long(),
                       "old_log_probs": old, "advantages": adv}, batch_size=[b])
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=None, global_batch_size=None)
    cfg = actor_config("top_entropy", calculate_entropy=True)
    loss, metrics = losses.ppo_loss(cfg, {"log_probs": flat_logp, "entropy": flat_ent}, data)
    assert plug._ENTROPY.get() is None  # reset after the call
    ref = policy_loss("top_entropy", logp, old, adv, mask.bool(), entropy=ent, q=0.2,
                      c_low=0.8, c_high=1.28)
    torch.testing.assert_close(loss, ref.loss, rtol=1e-6, atol=1e-7)
    loss.backward()
    carries = ref.in_loss & (ref.clip_state == 0)  # kept (top 20%) and not clipped
    assert int((flat_logp.grad != 0).sum()) == int(carries.sum()) > 0


def test_project_policy_loss_config_instantiates_from_yaml():
    _verl()
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    node = OmegaConf.create({"_target_": "src.integrations.verl_losses.ProjectPolicyLossConfig",
                             "loss_mode": "bapo", "method": {"bapo": {"rho0": 0.45}}})
    cfg = omega_conf_to_dataclass(node)
    assert cfg.loss_mode == "bapo" and cfg.method["bapo"]["rho0"] == 0.45
    from src.integrations.verl_losses import _method_for
    assert _method_for("bapo", {"policy_loss": cfg}).params["rho0"] == 0.45


def test_engine_workers_bind_the_wrapped_loss():
    # The actor worker binds `ppo_loss` from engine_workers' namespace in init_model, after
    # importing model.external_lib (this module); the wrapper must be what it finds there.
    _verl()
    workers = pytest.importorskip("verl.workers.engine_workers")  # needs uvicorn + fastapi
    import src.integrations.verl_losses as plug
    assert plug.install_entropy_passthrough()
    assert getattr(workers.ppo_loss, "__repro_entropy_passthrough__", False)


def test_example_verl_config_composes():
    _verl()
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from verl.utils.config import omega_conf_to_dataclass

    from src.integrations.verl_losses import ProjectPolicyLossConfig, _method_for
    conf = Path(__file__).resolve().parents[2] / "conf" / "integrations"
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        cfg = compose(config_name="verl_grpo", overrides=[
            "actor_rollout_ref.actor.policy_loss.loss_mode=bapo_official",
            "+actor_rollout_ref.actor.policy_loss.method.bapo.rho0=0.45"])
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert isinstance(actor.policy_loss, ProjectPolicyLossConfig)
    assert actor.calculate_entropy and actor.shuffle and actor.loss_agg_mode == "token-mean"
    method = _method_for(actor.policy_loss.loss_mode, actor)
    assert (method.name, method.params["rho0"], method.params["order"]) == ("bapo_official", 0.45, "official")
    k = cfg.data.train_batch_size // cfg.actor_rollout_ref.actor.ppo_mini_batch_size
    assert k * cfg.actor_rollout_ref.actor.ppo_epochs == 4
    assert cfg.actor_rollout_ref.model.external_lib == "src.integrations.verl_losses"


def test_task_data_and_reward_for_verl(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    from src.integrations.tasks import compute_score, export_verl_parquet
    train, val = export_verl_parquet(tmp_path, "arithmetic", n_train=4, n_val=3)
    rows = pq.read_table(train).to_pylist() + pq.read_table(val).to_pylist()
    assert len(rows) == 7 and rows[0]["prompt"][0]["role"] == "user"
    for r in rows:
        truth = r["reward_model"]["ground_truth"]
        score = lambda text, r=r, truth=truth: compute_score(r["data_source"], text, truth, r["extra_info"])  # noqa: E731
        assert score(f"some work. Answer: {truth}") == 1.0
        assert score(f"Answer: {int(truth) + 1}") == 0.0
