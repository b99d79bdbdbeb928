"""Scoring in length groups, and update 0 reusing the behaviour pass's forward."""

from __future__ import annotations

import itertools

import torch

from src.policy import grouped_response_logprobs, length_groups, response_logprobs
from src.trainer import MiniBatch, Trainer
from tests.test_microbatch import ADVANTAGES, B, _config, _rollout, _tiny_model


def _brute_force_cost(p: list[int], r: list[int], pass_cost: int) -> int:
    """Cheapest split of the rows sorted by p + r into contiguous groups, by enumeration."""
    order = sorted(range(len(p)), key=lambda i: p[i] + r[i])
    best = None
    for cuts in itertools.product([False, True], repeat=len(p) - 1):
        groups, current = [], [order[0]]
        for row, cut in zip(order[1:], cuts, strict=True):
            if cut:
                groups.append(current)
                current = []
            current.append(row)
        groups.append(current)
        cost = sum(len(g) * (max(p[i] for i in g) + max(r[i] for i in g)) + pass_cost for g in groups)
        best = cost if best is None else min(best, cost)
    return best


def test_length_groups_is_the_cheapest_split():
    gen = torch.Generator().manual_seed(0)
    for trial in range(30):
        n = 1 + trial % 9
        p = torch.randint(1, 20, (n,), generator=gen)
        r = torch.randint(1, 60, (n,), generator=gen)
        pass_cost = [0, 16, 64, 400][trial % 4]
        groups = length_groups(p, r, pass_cost)
        assert sorted(torch.cat(groups).tolist()) == list(range(n))  # every row once
        assert all(torch.equal(g, g.sort().values) for g in groups)
        cost = sum(len(g) * int(p[g].max() + r[g].max()) + pass_cost for g in groups)
        assert cost == _brute_force_cost(p.tolist(), r.tolist(), pass_cost)


def test_length_groups_by_hand():
    # Two short rows and two long ones: splitting saves 2 * (40 - 8) = 64 positions.
    p, r = torch.tensor([3, 10, 2, 9]), torch.tensor([5, 30, 6, 31])
    assert [g.tolist() for g in length_groups(p, r, pass_cost=63)] == [[0, 2], [1, 3]]
    assert [g.tolist() for g in length_groups(p, r, pass_cost=65)] == [[0, 1, 2, 3]]


def test_grouped_scoring_gives_the_padded_numbers_and_gradients():
    model, data = _tiny_model(), _rollout()
    assert len(length_groups(data.prompt_mask.sum(1), data.response_mask.sum(1))) == 1
    groups = length_groups(data.prompt_mask.sum(1), data.response_mask.sum(1), pass_cost=0)
    assert len(groups) > 2  # the test batch really is split
    results = []
    for score in (response_logprobs,
                  lambda m, d: grouped_response_logprobs(m, d, pass_cost=0)):
        model.zero_grad(set_to_none=True)
        logp, ent = score(model, data)
        (logp * data.response_mask).sum().backward()
        results.append((logp.detach(), ent, [q.grad.clone() for q in model.parameters()]))
    (lp_a, ent_a, grad_a), (lp_b, ent_b, grad_b) = results
    m = data.response_mask
    assert lp_b.shape == lp_a.shape
    assert torch.allclose(lp_a[m], lp_b[m], atol=1e-5) and torch.allclose(ent_a[m], ent_b[m], atol=1e-5)
    for ga, gb in zip(grad_a, grad_b, strict=True):
        assert torch.allclose(ga, gb, atol=1e-6, rtol=1e-4)


def test_update_zero_uses_the_behaviour_pass_and_gets_its_gradient():
    """Update 0 backpropagates through the kept behaviour forward: the same gradient, bit for
    bit, as a fresh forward with the same weights, and one forward fewer."""
    model, data = _tiny_model(), _rollout()
    trainer = Trainer(_config("ppo", "token-mean", None), model, None, None, None, None, None,
                      None, None)
    logp, entropy = response_logprobs(model, data)
    grads = []
    for kept in ((logp, entropy), None):
        mb = MiniBatch(torch.arange(B), data, logp.detach(), entropy, ADVANTAGES.clone(),
                       torch.zeros(B), policy_pass=kept)
        model.zero_grad(set_to_none=True)
        done = trainer._backward(mb, on_policy=True)
        assert done.skip_reason is None and mb.policy_pass is None  # used once, then dropped
        assert (done.out.ratio[data.response_mask] == 1.0).all()
        grads.append([q.grad.clone() for q in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*grads, strict=True))


def test_minibatches_run_one_forward_each_and_keep_only_the_first_graph(monkeypatch):
    import src.trainer as trainer_module

    model, data = _tiny_model(), _rollout()
    cfg = _config("ppo", "token-mean", None)
    cfg.train.staleness = 2
    trainer = Trainer(cfg, model, None, None, None, None, None, None, None)
    calls = []
    real = trainer_module.grouped_response_logprobs

    def counted(m, batch, **kw):
        calls.append(torch.is_grad_enabled())
        return real(m, batch, **kw)

    monkeypatch.setattr(trainer_module, "grouped_response_logprobs", counted)
    batches = trainer._minibatches(data, ADVANTAGES.clone(), torch.zeros(B), step=0)
    assert calls == [True, False]  # mini-batch 0 with grad (kept), mini-batch 1 without
    assert batches[0].policy_pass is not None and batches[1].policy_pass is None
    assert batches[0].policy_pass[0].requires_grad and not batches[0].logp_behavior.requires_grad
    assert torch.equal(batches[0].policy_pass[0].detach(), batches[0].logp_behavior)
    for mb in batches:
        trainer._backward(mb, on_policy=mb is batches[0])
    assert calls == [True, False, True]  # update 0 ran no forward of its own
