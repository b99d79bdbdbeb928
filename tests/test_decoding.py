"""The decode loop (src/models/decoding.py) against HF `generate` and a teacher-forced forward.

Greedy: the same tokens as `generate` on prompts of many lengths whose responses end at
many different steps. Sampling: every draw is `generate`'s draw while no row has ended
(same seed, EOS masked), so the per-step distribution is HF's bit for bit; and the
sampler's log-probs are those a teacher-forced forward gives to the sampled tokens.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import GenerationConfig
from transformers.generation.logits_process import TopPLogitsWarper

import src.models.decoding as decoding
from src.build import build_model, build_task
from src.models.decoding import _preallocated_cache, _repeated_rows, _top_p_filter, decode
from src.models.sampling import generate
from src.policy import response_logprobs
from src.rollout.hf import HFRollout
from tests.conftest import compose

MAX_NEW = 40


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def warm(smoke_overrides):
    """The e2e tests' warm start (a 2-layer model that answers 2-term sums and stops at EOS)
    and 48 prompts of 2 to 7 terms, so prompt and response lengths vary widely."""
    cfg = compose(smoke_overrides)
    task = build_task(cfg.task)
    model, tok, _ = build_model(cfg.model, task, torch.device("cpu"), progress=False,
                                cache_dir=cfg.cache_dir, numerics=cfg.numerics)
    model.eval()
    wide = compose([*smoke_overrides, "task.params.max_terms=7"])
    prompts = [p.prompt for p in build_task(wide.task).eval_problems(48)]
    return model, tok, prompts


def _encode(tok, prompts):
    old, tok.padding_side = tok.padding_side, "left"
    try:
        enc = tok(prompts, return_tensors="pt", padding=True)
    finally:
        tok.padding_side = old
    return enc["input_ids"], enc["attention_mask"]


def _hf(model, tok, ids, mask, **gen):
    cfg = GenerationConfig(max_new_tokens=MAX_NEW, pad_token_id=tok.pad_token_id,
                           eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id, **gen)
    return model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)[:, ids.shape[1]:]


def _decode(model, tok, ids, mask, **kw):
    return decode(model, ids, mask, max_new_tokens=MAX_NEW, eos_token_id=tok.eos_token_id,
                  pad_token_id=tok.pad_token_id, **kw)


def test_greedy_tokens_are_hf_generates(warm):
    model, tok, prompts = warm
    ids, mask = _encode(tok, prompts)
    expected = _hf(model, tok, ids, mask, do_sample=False)
    out = _decode(model, tok, ids, mask, greedy=True)
    width = expected.shape[1]
    # The case this loop exists for: rows end at many different steps, most before the end.
    ends = out.lengths[out.tokens[torch.arange(len(prompts)), out.lengths - 1] == tok.eos_token_id]
    assert len(set(ends.tolist())) >= 5 and int(ends.min()) < width // 2
    assert len(set(mask.sum(dim=1).tolist())) >= 4  # prompts of several lengths, left-padded
    assert torch.equal(out.tokens[:, :width], expected)
    assert (out.tokens[:, width:] == tok.pad_token_id).all()


def test_eval_greedy_responses_are_hf_generates(warm):
    model, tok, prompts = warm
    ids, mask = _encode(tok, prompts)
    expected = _hf(model, tok, ids, mask, do_sample=False).tolist()
    got = generate(model, tok, prompts, max_new_tokens=MAX_NEW, greedy=True, batch_size=20)
    for g, row in zip(got, expected, strict=True):
        n = row.index(tok.eos_token_id) + 1 if tok.eos_token_id in row else len(row)
        assert g.token_ids == row[:n]
        assert g.finished == (tok.eos_token_id in row)


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 0.9), (1.3, 0.5)])
def test_each_draw_is_hf_generates_while_no_row_has_ended(warm, temperature, top_p):
    """With EOS masked no row leaves the batch, so both loops draw from the same random
    stream with the same probabilities: the tokens must be identical."""
    model, tok, prompts = warm
    ids, mask = _encode(tok, prompts[:24])
    sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": top_p,
                "min_new_tokens": MAX_NEW}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(11)
        expected = _hf(model, tok, ids, mask, **sampling)
    out = _decode(model, tok, ids, mask, temperature=temperature, top_p=top_p,
                  min_new_tokens=MAX_NEW, generator=torch.Generator().manual_seed(11))
    assert torch.equal(out.tokens, expected)
    assert (out.lengths == MAX_NEW).all()


def test_top_p_filter_is_hfs():
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(64, 50, generator=gen) * 3
    scores[:8, :5] = 2.0  # ties at the cut
    for top_p in (0.05, 0.3, 0.9, 0.999):
        assert torch.equal(_top_p_filter(scores, top_p), TopPLogitsWarper(top_p)(None, scores))


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 0.8)])
def test_sampler_logprobs_match_a_teacher_forced_forward(warm, temperature, top_p):
    model, tok, prompts = warm
    roll = HFRollout(model, tok).generate(prompts[:16], num_samples=4, max_new_tokens=MAX_NEW,
                                          temperature=temperature, top_p=top_p, seed=5)
    lengths = roll.lengths()
    assert len(set(lengths.tolist())) >= 5  # rows left the batch at many steps
    ids = torch.cat([roll.prompt_ids, roll.response_ids], dim=1)
    attention = torch.cat([roll.prompt_mask, roll.response_mask], dim=1)
    with torch.no_grad():
        if temperature == 1.0 and top_p == 1.0:  # the trainer's own scoring function
            logp, _ = response_logprobs(model, roll)
        else:  # the processed distribution: logits / T, then HF's top-p filter
            logits = model(input_ids=ids, attention_mask=attention.long(),
                           position_ids=(attention.long().cumsum(1) - 1).clamp(min=0)).logits
            p = roll.prompt_ids.shape[1]
            scores = logits[:, p - 1:-1].float() / temperature
            flat = TopPLogitsWarper(top_p)(None, scores.reshape(-1, scores.shape[-1]))
            logp = torch.log_softmax(flat, -1).view_as(scores).gather(
                -1, roll.response_ids[..., None])[..., 0]
    m = roll.response_mask
    assert torch.isfinite(logp[m]).all()
    assert (roll.sampler_logp[m] - logp[m]).abs().max() < 1e-4
    assert (roll.sampler_logp[~m] == 0).all()


def test_rollout_layout_and_determinism(warm):
    model, tok, prompts = warm
    backend = HFRollout(model, tok, batch_size=12)  # several chunks of different widths
    a = backend.generate(prompts[:10], num_samples=3, max_new_tokens=MAX_NEW, seed=2)
    b = backend.generate(prompts[:10], num_samples=3, max_new_tokens=MAX_NEW, seed=2)
    c = backend.generate(prompts[:10], num_samples=3, max_new_tokens=MAX_NEW, seed=3)
    assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.sampler_logp, b.sampler_logp)
    assert not torch.equal(a.response_ids, c.response_ids)
    eos, pad = tok.eos_token_id, tok.pad_token_id
    assert a.response_ids.shape[1] == int(a.lengths().max())
    for row, n in zip(a.response_ids.tolist(), a.lengths().tolist(), strict=True):
        assert eos not in row[:n - 1]  # the mask runs through the first EOS
        assert row[n - 1] == eos or n == MAX_NEW
        assert all(t == pad for t in row[n:])
    assert a.texts == tok.batch_decode(torch.where(a.response_mask, a.response_ids, pad),
                                       skip_special_tokens=True)


def test_generate_samples_through_decode_seeded(warm):
    """The eval sampler is `decode` at temperature with no top-p, on its own generator."""
    model, tok, prompts = warm
    got = generate(model, tok, prompts[:6], num_samples=2, max_new_tokens=MAX_NEW,
                   temperature=0.9, seed=4)
    ids, mask = _encode(tok, [p for p in prompts[:6] for _ in range(2)])
    out = _decode(model, tok, ids, mask, temperature=0.9, generator=torch.Generator().manual_seed(4))
    assert [g.token_ids for g in got] == [row[:n] for row, n in zip(out.tokens.tolist(),
                                                                       out.lengths.tolist(), strict=True)]


def test_min_new_tokens_forces_full_length(warm):
    model, tok, prompts = warm
    roll = HFRollout(model, tok, min_new_tokens=MAX_NEW).generate(
        prompts[:4], num_samples=2, max_new_tokens=MAX_NEW, seed=0)
    assert (roll.lengths() == MAX_NEW).all()
    with pytest.raises(ValueError, match="min_new_tokens"):
        HFRollout(model, tok, min_new_tokens=-1)


@pytest.mark.parametrize("greedy", [True, False])
def test_the_preallocated_cache_gives_the_models_own_caches_numbers(warm, monkeypatch, greedy):
    """Bit for bit: the loop over `_PreallocatedLayer`s against the same loop over the cache
    the model builds itself (`DynamicLayer`, a `torch.cat` per step), rows leaving at many
    steps, prompts of many lengths, each prompt twice (so the model's own cache is also
    the one copied from one prefill per prompt)."""
    model, tok, prompts = warm
    ids, mask = _encode(tok, prompts)
    ids, mask = ids.repeat_interleave(2, 0), mask.repeat_interleave(2, 0)
    fast = _decode(model, tok, ids, mask, greedy=greedy, generator=torch.Generator().manual_seed(3))
    assert len(set(fast.lengths.tolist())) >= 5
    monkeypatch.setattr(decoding, "_preallocated_cache", lambda *_: None)
    own = _decode(model, tok, ids, mask, greedy=greedy, generator=torch.Generator().manual_seed(3))
    assert torch.equal(fast.tokens, own.tokens) and torch.equal(fast.lengths, own.lengths)
    assert torch.equal(fast.logp, own.logp)


def test_the_preallocated_cache_is_only_for_full_attention(warm):
    model, _, _ = warm
    cache = _preallocated_cache(model, 30)
    assert len(cache.layers) == model.config.num_hidden_layers
    assert all(layer.capacity == 30 for layer in cache.layers)
    sliding = SimpleNamespace(config=SimpleNamespace(
        num_hidden_layers=2, layer_types=["full_attention", "sliding_attention"]))
    assert _preallocated_cache(sliding, 30) is None  # the model keeps its own cache
    layer = _preallocated_cache(model, 3).layers[0]
    layer.update(torch.zeros(1, 2, 2, 4), torch.zeros(1, 2, 2, 4))  # 2 of 3 positions
    with pytest.raises(RuntimeError, match="overflowed"):
        layer.update(torch.zeros(1, 2, 2, 4), torch.zeros(1, 2, 2, 4))


def test_repeated_rows_are_runs_of_identical_consecutive_prompts():
    ids = torch.tensor([[0, 5, 6], [0, 5, 6], [7, 8, 9], [0, 5, 6], [0, 5, 6], [0, 5, 6]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 1], [0, 1, 1], [1, 1, 1], [1, 1, 1]])
    first, copies = _repeated_rows(ids, mask)
    # rows 3 and 4 hold the same ids but not the same mask: two runs
    assert first.tolist() == [0, 2, 3, 4]
    assert copies.tolist() == [0, 0, 1, 2, 3, 3]


@pytest.mark.parametrize("greedy", [True, False])
def test_one_prefill_per_prompt_gives_one_per_samples_numbers(warm, monkeypatch, greedy):
    """A rollout's layout (each prompt repeated once per sample): prefilling each prompt
    once and copying its cache gives the numbers of prefilling every copy, bit for bit."""
    model, tok, prompts = warm
    ids, mask = _encode(tok, prompts[:12])
    ids, mask = ids.repeat_interleave(4, 0), mask.repeat_interleave(4, 0)
    once = _decode(model, tok, ids, mask, greedy=greedy, generator=torch.Generator().manual_seed(7))
    every = torch.arange(ids.shape[0])
    monkeypatch.setattr(decoding, "_repeated_rows", lambda *_: (every, every))
    each = _decode(model, tok, ids, mask, greedy=greedy, generator=torch.Generator().manual_seed(7))
    assert torch.equal(once.tokens, each.tokens) and torch.equal(once.lengths, each.lengths)
    assert torch.equal(once.logp, each.logp)
    if not greedy:  # the copies of a prompt sampled different responses
        assert len({tuple(r) for r in once.tokens[:4].tolist()}) > 1
    else:
        expected = _hf(model, tok, ids, mask, do_sample=False)
        assert torch.equal(once.tokens[:, :expected.shape[1]], expected)
