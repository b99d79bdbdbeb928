"""Update 0 reuses mini-batch 0's behaviour forward instead of running it again."""

from __future__ import annotations

import pytest
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
                       torch.zeros(B))
        model.zero_grad(set_to_none=True)
        done = trainer.update.gradient(mb, on_policy=True, kept_forward=kept)
        assert done.skip_reason is None
        assert (done.logp is logp) == (kept is not None)  # the kept forward's own tensors
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
    built = trainer._minibatches(TrainingSet([fresh]), TrainState())
    batches, kept = built.batches, built.kept_forward.take()
    assert built.kept_forward.take() is None  # handed over once: its graph goes with it
    assert calls == [True, False]  # mini-batch 0 with grad (kept), mini-batch 1 without
    assert kept[0].requires_grad and not batches[0].logp_behavior.requires_grad
    assert torch.equal(kept[0].detach(), batches[0].logp_behavior)
    for mb in batches:
        first = mb is batches[0]
        trainer.update.gradient(mb, on_policy=first, kept_forward=kept if first else None)
    assert calls == [True, False, True]  # update 0 ran no forward of its own


def test_a_minibatch_is_frozen_and_the_step_writes_no_batch():
    """Nothing writes to a mini-batch once built: assigning a field raises, and a whole step
    leaves every field of every mini-batch the tensor it was built with."""
    import dataclasses

    model, data = tiny_model(), tiny_rollout()
    cfg = _config("ppo", "token-mean", None)
    cfg.train.staleness = 2
    trainer = Trainer(cfg, model, None, None, None, None, None, None, None)
    fresh = StoredRollout(0, 0, 0, data, torch.zeros(B), torch.zeros(B), ADVANTAGES.clone(), 0, 2)
    built = trainer._minibatches(TrainingSet([fresh]), TrainState())
    mb = built.batches[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        mb.decision = None
    before = [{f.name: getattr(b, f.name) for f in dataclasses.fields(b)} for b in built.batches]
    copies = [{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in d.items()}
              for d in before]
    trainer.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer.update.optimizer = trainer.optimizer
    trainer.update.scheduler = torch.optim.lr_scheduler.LambdaLR(trainer.optimizer, lambda _: 1.0)
    for j, b in enumerate(built.batches):
        trainer.update(b, j, on_policy=j == 0, kept_forward=built.kept_forward.take() if j == 0 else None)
    for b, d, c in zip(built.batches, before, copies, strict=True):
        for name, value in d.items():
            assert getattr(b, name) is value, name  # the same object ...
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, c[name]), name  # ... with the same numbers
