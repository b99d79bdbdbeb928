"""Update 0 reuses mini-batch 0's behaviour forward instead of running it again."""

from __future__ import annotations

import torch

from src.checkpoint import TrainState
from src.minibatches import MiniBatch
from src.policy import response_logprobs
from src.schedule import StoredRollout, TrainingSet
from src.trainer import Trainer
from tests.test_microbatch import ADVANTAGES, _config
from tests.tiny_policy import B, tiny_model, tiny_rollout


def test_update_zero_uses_the_behaviour_pass_and_gets_its_gradient():
    """Update 0 backpropagates through the kept behaviour forward: the same gradient, bit for
    bit, as a fresh forward with the same weights, and one forward fewer."""
    model, data = tiny_model(), tiny_rollout()
    trainer = Trainer(_config("ppo", "token-mean", None), model, None, None, None, None, None,
                      None, None)
    logp, entropy = response_logprobs(model, data)
    grads = []
    for kept in ((logp, entropy), None):
        mb = MiniBatch(torch.arange(B), data, logp.detach(), entropy, ADVANTAGES.clone(),
                       torch.zeros(B), policy_pass=kept)
        model.zero_grad(set_to_none=True)
        done = trainer.gradient_step.gradient(mb, on_policy=True)
        assert done.skip_reason is None and mb.policy_pass is None  # used once, then dropped
        assert (done.out.ratio[data.response_mask] == 1.0).all()
        grads.append([q.grad.clone() for q in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*grads, strict=True))


def test_minibatches_run_one_forward_each_and_keep_only_the_first_graph(monkeypatch):
    import src.policy as policy_module

    model, data = tiny_model(), tiny_rollout()
    cfg = _config("ppo", "token-mean", None)
    cfg.train.staleness = 2
    trainer = Trainer(cfg, model, None, None, None, None, None, None, None)
    calls = []
    real = policy_module.response_logprobs

    def counted(m, batch, **kw):
        calls.append(torch.is_grad_enabled())
        return real(m, batch, **kw)

    monkeypatch.setattr(policy_module, "response_logprobs", counted)
    fresh = StoredRollout(0, 0, 0, data, torch.zeros(B), torch.zeros(B), ADVANTAGES.clone(), 0, 2)
    batches = trainer._minibatches(TrainingSet([fresh]), TrainState())
    assert calls == [True, False]  # mini-batch 0 with grad (kept), mini-batch 1 without
    assert batches[0].policy_pass is not None and batches[1].policy_pass is None
    assert batches[0].policy_pass[0].requires_grad and not batches[0].logp_behavior.requires_grad
    assert torch.equal(batches[0].policy_pass[0].detach(), batches[0].logp_behavior)
    for mb in batches:
        trainer.gradient_step.gradient(mb, on_policy=mb is batches[0])
    assert calls == [True, False, True]  # update 0 ran no forward of its own
