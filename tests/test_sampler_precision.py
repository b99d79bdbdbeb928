"""The rollout engine's precision (`rollout.precision`) and temperature-consistent scoring.

The sampler's copy holds the trainer's current weights in its precision; int8 is the exact
W8A8 product (checked against integer arithmetic); the trainer scores logits / T, so at
fp32 the sampler's and the trainer's log-probs agree to rounding at any temperature.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from src.policy import response_logprobs, sampled_logprobs
from src.rollout.hf import HFRollout
from src.rollout.sampler_precision import Int8Linear, refresh, runs_on, sampler_copy
from tests.tiny_policy import tiny_model

PROMPTS = ["1 + 2 =", "3 + 4 + 5 ="]


class _Tok:
    """The least of a tokenizer HFRollout needs: fixed prompt ids, left padding."""

    pad_token_id, eos_token_id, padding_side, bos_token = 0, 60, "right", None

    def __call__(self, prompts, return_tensors, padding, add_special_tokens):
        rows = [[(7 * i + j) % 50 + 1 for j in range(3 + i)] for i in range(len(prompts))]
        width = max(map(len, rows))
        ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
        return {"input_ids": ids, "attention_mask": (ids != 0).long()}

    def batch_decode(self, ids, skip_special_tokens):
        return [""] * len(ids)


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _rollout(precision: str, temperature: float = 1.0, model=None):
    model = model or tiny_model()
    backend = HFRollout(model, _Tok(), precision=precision)
    roll = backend.generate(PROMPTS, num_samples=8, max_new_tokens=8, temperature=temperature, seed=3)
    return model, backend, roll


def test_fp32_samples_from_the_live_model():
    model, backend, roll = _rollout("fp32")
    assert sampler_copy(model, "fp32") is None and backend._sampling_model() is model
    with torch.no_grad():
        logp, _ = response_logprobs(model, roll)
    m = roll.response_mask
    assert torch.allclose(roll.sampler_logp[m], logp[m], atol=2e-5)


@pytest.mark.parametrize("precision", ["bf16", "fp16", "int8"])
def test_a_low_precision_sampler_differs_from_the_trainer_by_a_little(precision):
    model, backend, roll = _rollout(precision)
    sampler = backend._sampling_model()
    assert sampler is not model
    if precision != "int8":
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
        assert all(p.dtype == dtype for p in sampler.parameters())
        assert all(b.dtype == torch.float32 for b in sampler.buffers())  # RoPE stays fp32
    else:
        linears = [m for m in sampler.modules() if isinstance(m, Int8Linear)]
        assert len(linears) == 2 * 7  # q, k, v, o, gate, up, down per layer; not the LM head
        assert isinstance(sampler.get_output_embeddings(), nn.Linear)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the trainer untouched
    with torch.no_grad():
        logp, _ = response_logprobs(model, roll)
    gap = (roll.sampler_logp - logp)[roll.response_mask].abs()
    assert 0 < float(gap.mean()) < 0.05, float(gap.mean())


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_the_sampler_follows_the_trainers_weights(precision):
    """After an optimizer step the copy holds the new weights: equal to a fresh copy's."""
    model = tiny_model()
    sampler = sampler_copy(model, precision)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05)
    refresh(sampler, model, precision)
    fresh = sampler_copy(model, precision)
    ids = torch.randint(1, 60, (3, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(sampler(input_ids=ids).logits, fresh(input_ids=ids).logits)
        assert not torch.equal(sampler(input_ids=ids).logits,
                               sampler_copy(tiny_model(), precision)(input_ids=ids).logits)


@pytest.mark.parametrize("in_features", [96, 1536])  # an fp32 product, and an fp64 one
def test_int8_linear_is_the_exact_integer_product(in_features):
    gen = torch.Generator().manual_seed(1)
    linear = nn.Linear(in_features, 40)
    x = torch.randn(5, in_features, generator=gen) * 3
    layer = Int8Linear(linear)
    w = linear.weight.detach()
    # by hand: symmetric per output channel / per token, round half to even, int64 product
    w_scale = w.abs().amax(dim=1, keepdim=True) / 127
    w_q = torch.round(w / w_scale).clamp(-127, 127).long()
    x_scale = x.abs().amax(dim=1, keepdim=True) / 127
    x_q = torch.round(x / x_scale).clamp(-127, 127).long()
    expected = (x_q @ w_q.t()).float() * x_scale * w_scale.t() + linear.bias.detach()
    assert torch.equal(layer.weight_q.long(), w_q) and int(w_q.abs().amax(dim=1).min()) == 127
    assert torch.equal(layer(x), expected)
    assert 0 < float((layer(x) - linear(x)).abs().max().detach()) < 0.1  # quantized, but close


def test_cpu_runs_half_precision():
    assert runs_on("cpu", "bf16") is None and runs_on("cpu", "fp16") is None


@pytest.mark.parametrize("temperature", [0.7, 1.5])
def test_at_any_temperature_fp32_sampler_and_trainer_agree(temperature):
    model, _, roll = _rollout("fp32", temperature=temperature)
    m = roll.response_mask
    with torch.no_grad():
        logp, _ = response_logprobs(model, roll, temperature=temperature)
        at_one, _ = response_logprobs(model, roll)
    assert torch.allclose(roll.sampler_logp[m], logp[m], atol=2e-5)
    assert float((at_one - logp)[m].abs().max()) > 1e-2  # scoring at T = 1 would be wrong


def test_tempered_logprobs_and_their_gradient_by_hand():
    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(4, 6, 11, dtype=torch.float64, generator=gen, requires_grad=True)
    targets = torch.randint(0, 11, (4, 6), generator=gen)
    for temperature in (0.6, 1.0, 1.7):
        logp, entropy = sampled_logprobs(logits, targets, chunk_elements=33, temperature=temperature)
        log_probs = torch.log_softmax(logits / temperature, dim=-1)
        assert torch.allclose(logp, log_probs.gather(-1, targets[..., None])[..., 0])
        assert torch.allclose(entropy, -(log_probs.exp() * log_probs).sum(-1).float(), atol=1e-6)
        assert torch.autograd.gradcheck(
            lambda x, t=temperature: sampled_logprobs(x, targets, chunk_elements=33, temperature=t)[0],
            (logits,))
