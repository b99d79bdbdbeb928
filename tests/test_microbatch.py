"""Gradient accumulation over micro-batches gives the whole mini-batch's update.

For every method and aggregation, the parameter gradients, the update metrics, BAPO's
bounds and top_entropy's selection from `train.micro_batch_size` = 1 and 2 must equal (up
to float rounding; the discrete choices exactly) those of one pass over the mini-batch.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from src.algorithms import METHODS as REGISTERED
from src.algorithms import update_metrics
from src.algorithms.surrogate import (
    AGGREGATIONS,
    CLIP_HIGH,
    CLIP_LOW,
    aggregate,
    clip_states,
    loss_denominator,
)
from src.config import ConfigError
from src.minibatches import MiniBatch
from src.policy import response_logprobs, sampled_logprobs
from src.rollout import Rollout
from src.trainer import Trainer
from tests.conftest import compose
from tests.tiny_policy import B, tiny_model, tiny_rollout

METHODS = sorted(REGISTERED)  # every registered method
# Per-response advantages: mostly negative, one zero, so BAPO has to move its bounds.
ADVANTAGES = torch.tensor([1.0, -1.0, -1.2, -0.5, 0.6, -1.5, -0.8, 0.0])
# The tiny model's token probabilities are all ~0.01-0.1, where these methods' defaults leave
# every token alone (dcpo's bounds are widest for rare tokens, dppo's probability changes
# stay under its thresholds, sapo's gate stays above 1/2): narrower settings make them act.
ACTING = {"sapo": {"tau_pos": 5.0, "tau_neg": 5.0},
          "dppo_tv": {"delta_low": 0.005, "delta_high": 0.005},
          "dppo_kl": {"delta_low": 0.002, "delta_high": 0.002},
          "dcpo": {"eps_low": 0.002, "eps_high": 0.002}}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The tensors here are tiny: one thread is many times faster on a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def setup():
    """A model, a mini-batch of 8 responses, and behaviour log-probs from perturbed weights
    (so ratios spread over roughly [0.5, 2] and every clip state occurs)."""
    model = tiny_model()
    behaviour = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in behaviour.parameters():
            p.add_(0.08 * torch.randn(p.shape, generator=gen))
    data = tiny_rollout()
    with torch.no_grad():
        logp_b, ent_b = response_logprobs(behaviour, data)
    return model, data, logp_b, ent_b


def _config(method: str, aggregation: str, micro: int | None):
    acting = [f"method.{method}.{k}={v}" for k, v in ACTING.get(method, {}).items()]
    cfg = compose([f"method={method}", f"method.aggregation={aggregation}", *acting,
                   "train.prompts_per_step=2", "train.group_size=4", "rollout.max_new_tokens=12"])
    cfg.train.micro_batch_size = micro
    return cfg


def _run(model, data, logp_b, ent_b, method, aggregation, micro, *, on_policy=False):
    trainer = Trainer(_config(method, aggregation, micro), model, None, None, None, None, None,
                      None, None)
    mb = MiniBatch(torch.arange(B), data, logp_b, ent_b, ADVANTAGES.clone(), torch.zeros(B))
    model.zero_grad(set_to_none=True)
    done = trainer.update.gradient(mb, on_policy=on_policy, seed=11)
    assert done.skip_reason is None
    grads = [p.grad.detach().clone() for p in model.parameters()]
    done.metrics = update_metrics(done.out, mb.advantages, data.response_mask, done.logp, done.entropy)
    return done, grads


def _assert_metrics_match(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key, x in a.items():
        y = b[key]
        if isinstance(x, float) and isinstance(y, float):
            assert math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-7), (key, x, y)
        else:
            assert x == y, (key, x, y)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("method", METHODS)
def test_micro_batches_give_the_whole_mini_batch_gradient(setup, method, aggregation):
    model, data, logp_b, ent_b = setup
    whole, whole_grads = _run(model, data, logp_b, ent_b, method, aggregation, None)
    mask = data.response_mask
    # the data clips both ways at ppo's bounds, and the method acts on some of its tokens
    ppo_states = clip_states(whole.out.ratio, ADVANTAGES[:, None].expand_as(mask), 0.8, 1.2)[mask]
    assert (ppo_states == CLIP_LOW).any() and (ppo_states == CLIP_HIGH).any()
    assert (whole.out.clip_state[mask] != 0).any()
    if method == "bapo":
        assert whole.metrics["bapo_steps"] > 0  # ... and makes BAPO search
    for micro in (1, 2):
        part, grads = _run(model, data, logp_b, ent_b, method, aggregation, micro)
        for g, h in zip(grads, whole_grads, strict=True):
            assert torch.allclose(g, h, rtol=1e-5, atol=1e-6 * float(h.abs().max())), \
                (micro, float((g - h).abs().max()))
        assert (part.out.c_low, part.out.c_high) == (whole.out.c_low, whole.out.c_high)
        if method == "bapo":
            a, b = part.out.bounds, whole.out.bounds
            assert (a.c_low, a.c_high, a.steps, a.reached, a.undefined) == \
                (b.c_low, b.c_high, b.steps, b.reached, b.undefined)
            assert math.isclose(a.rho, b.rho, rel_tol=1e-6)
        assert torch.equal(part.out.in_loss, whole.out.in_loss)  # top_entropy's selection
        assert torch.equal(part.out.clip_state, whole.out.clip_state)
        mask = data.response_mask
        assert torch.allclose(part.logp[mask], whole.logp[mask], rtol=0, atol=1e-6)
        assert torch.allclose(part.entropy[mask], whole.entropy[mask], rtol=0, atol=1e-6)
        assert math.isclose(float(part.out.loss), float(whole.out.loss.detach()), rel_tol=1e-5, abs_tol=1e-8)
        assert (part.out.decision.tokens is None) == (whole.out.decision.tokens is None)
        if whole.out.decision.tokens is not None:  # a decided token set: exactly the same
            assert torch.equal(part.out.decision.tokens, whole.out.decision.tokens)
        _assert_metrics_match(part.metrics, whole.metrics)


@pytest.mark.parametrize("method", [m for m in METHODS if REGISTERED[m].decides])
def test_on_policy_update_reuses_the_behaviour_pass_exactly(setup, method):
    """With unchanged weights the no-grad pre-pass is skipped: the behaviour numbers, taken
    on the same micro-batches, are the current ones bit for bit."""
    model, data, _, _ = setup
    cfg = _config(method, "token-mean", 2)
    trainer = Trainer(cfg, model, None, None, None, None, None, None, None)
    with torch.no_grad():
        logp_b, ent_b = trainer.scorer(data)
    mb = MiniBatch(torch.arange(B), data, logp_b, ent_b, ADVANTAGES.clone(), torch.zeros(B))
    mask = data.response_mask
    reused = trainer.update.whole_batch_decision(mb, mask, mb.advantages, on_policy=True, seed=0)
    fresh = trainer.update.whole_batch_decision(mb, mask, mb.advantages, on_policy=False, seed=0)
    assert (reused.tokens is None) == (fresh.tokens is None)
    if reused.tokens is not None:
        assert torch.equal(reused.tokens, fresh.tokens)
    assert reused.data == fresh.data and dict(reused.record) == dict(fresh.record)
    done = trainer.update.gradient(mb, on_policy=True)
    assert (done.out.ratio[mask] == 1.0).all()  # update 0 is on-policy bit for bit


def test_non_finite_micro_batch_skips_the_update(setup, monkeypatch):
    import src.policy as policy_module

    model, data, logp_b, ent_b = setup
    real, calls = policy_module.response_logprobs, {"n": 0}

    def nan_in_second_micro_batch(model, batch, **kw):
        logp, entropy = real(model, batch, **kw)
        if torch.is_grad_enabled():
            calls["n"] += 1
            if calls["n"] == 2:
                logp = logp + float("nan")
        return logp, entropy

    monkeypatch.setattr(policy_module, "response_logprobs", nan_in_second_micro_batch)
    trainer = Trainer(_config("bapo", "token-mean", 2), model, None, None, None, None, None,
                      None, None)
    mb = MiniBatch(torch.arange(B), data, logp_b, ent_b, ADVANTAGES.clone(), torch.zeros(B))
    done = trainer.update.gradient(mb)
    assert done.out is None and done.skip_reason.startswith("non-finite input: logp")


def test_slices_of_a_batch_sum_to_its_loss():
    gen = torch.Generator().manual_seed(0)
    loss = torch.randn(6, 9, generator=gen, dtype=torch.float64)
    mask = torch.rand(6, 9, generator=gen) < 0.6
    mask[4] = False  # a response with no loss-bearing token
    mask[2:4, 5:] = False  # one slice ends early and is trimmed, as Rollout.select does
    for mode in AGGREGATIONS:
        den = loss_denominator(mask, mode, 12)
        whole = aggregate(loss, mask, mode, 12)
        assert float(aggregate(loss, mask, mode, 12, denominator=den)) == float(whole)
        parts = sum(aggregate(loss[s:s + 2, :t], mask[s:s + 2, :t], mode, 12, denominator=den)
                    for s, t in ((0, 9), (2, 5), (4, 9)))
        assert torch.isclose(parts, whole, rtol=1e-12, atol=0), mode


def test_sampled_logprobs_match_log_softmax_in_chunks():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 7, 13, generator=gen, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 13, (3, 7), generator=gen)
    ref = torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0]
    for chunk in (13, 5 * 13, 10**6):  # one position per chunk, several, all
        logp, entropy = sampled_logprobs(logits, targets, chunk_elements=chunk)
        assert torch.allclose(logp, ref, atol=1e-12)
        p = logits.detach().softmax(-1)
        assert torch.allclose(entropy.double(), -(p * p.log()).sum(-1), atol=1e-5)
        g, = torch.autograd.grad((logp * targets).sum(), logits)
        g_ref, = torch.autograd.grad((ref * targets).sum(), logits, retain_graph=True)
        assert torch.allclose(g, g_ref, atol=1e-12)
    assert torch.autograd.gradcheck(lambda x: sampled_logprobs(x, targets, chunk_elements=26)[0],
                                    (logits,))


@pytest.mark.parametrize("value, message", [(0, "must be >= 1"), (3, "must divide the mini-batch")])
def test_micro_batch_size_is_validated(value, message):
    with pytest.raises(ConfigError, match=rf"^train\.micro_batch_size.*{message}"):
        compose(["train.prompts_per_step=2", "train.group_size=4", f"train.micro_batch_size={value}"])


def test_evaluator_generates_with_a_vllm_backend():
    from src.build import build_evaluator
    from src.tasks import get_task

    class FakeBackend:
        def __init__(self):
            self.calls = []

        def sync_weights(self, model):
            self.calls.append("sync")

        def generate(self, prompts, *, num_samples, max_new_tokens, temperature, top_p, seed):
            self.calls.append((num_samples, temperature, top_p))
            n = len(prompts) * num_samples
            return Rollout(torch.zeros(n, 1, dtype=torch.long), torch.ones(n, 1, dtype=torch.bool),
                           torch.zeros(n, 1, dtype=torch.long), torch.ones(n, 1, dtype=torch.bool),
                           torch.zeros(n, 1), [""] * n,
                           torch.arange(len(prompts)).repeat_interleave(num_samples))

    task = get_task("arithmetic")
    cfg = compose(["rollout=vllm", "task.eval_problems=3", "eval.samples=2"])
    backend = FakeBackend()
    record = build_evaluator(cfg, None, None, task, lambda p: p, backend=backend)(0)
    assert record == {"step": 0, "n_problems": 3, "greedy_accuracy": 0.0, "sampled_accuracy": 0.0}
    assert backend.calls == ["sync", (1, 0.0, 1.0), "sync", (2, cfg.rollout.temperature, 1.0)]


def test_smoke_run_with_micro_batches(tmp_path, smoke_overrides):
    import pandas as pd
    import pyarrow.parquet as pq

    from src.run import execute
    from tests.test_e2e import read_metrics

    run_dir = tmp_path / "micro"
    cfg = compose([*smoke_overrides, "method=bapo", "train.steps=2", "train.micro_batch_size=2"])
    assert cfg.train.micro_batch_size == 2
    assert execute(cfg, run_dir) == "finished"
    updates = read_metrics(run_dir)["update"]
    assert [(u["step"], u["update"]) for u in updates] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert not any(u["skipped"] for u in updates)
    tokens = pd.concat(pq.read_table(p).to_pandas() for p in (run_dir / "tokens").glob("*.parquet"))
    per_update = tokens.groupby(["step", "update"]).size()
    assert (per_update.values == [u["tokens_in_loss"] for u in updates]).all()
    # The behaviour pass scores the same micro-batches as the updates: update 0 is on-policy.
    assert (tokens[tokens["update"] == 0]["ratio"] == 1.0).all()
