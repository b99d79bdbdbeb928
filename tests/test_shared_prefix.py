"""train.shared_prefix and train.pack: the scoring forward's log-probs, entropies and the
gradient of every weight equal the plain forward's to float tolerance, on a tiny Llama with
several groups, ragged prompts and responses, and rows not in group order; both off by
default; combinations that cannot work refused by name."""

from __future__ import annotations

import pytest
import torch

from src.config import ConfigError
from src.packing import bucket_rows, length_buckets, padding_share
from src.policy import Scorer
from src.rollout import Rollout
from tests.conftest import compose
from tests.tiny_policy import VOCAB, tiny_model

P, T = 7, 11
PROMPT_LENGTHS = [7, 4, 6, 2]  # one prompt per group
RESPONSE_LENGTHS = [[11, 3, 7, 1], [5, 9, 2, 6], [8, 8, 4, 10], [1, 2, 11, 5]]


def grouped_rollout(seed: int = 3) -> Rollout:
    """4 groups x 4 responses with their group's prompt (left-padded to P, ragged), ragged
    right-padded responses, the rows shuffled so that no group's rows are adjacent."""
    gen = torch.Generator().manual_seed(seed)
    prompt_rows, response_rows, groups = [], [], []
    for g, (p_len, lengths) in enumerate(zip(PROMPT_LENGTHS, RESPONSE_LENGTHS, strict=True)):
        prompt = torch.randint(1, VOCAB, (P,), generator=gen) * (torch.arange(P) >= P - p_len)
        for n in lengths:
            prompt_rows.append(prompt)
            response_rows.append(torch.randint(1, VOCAB, (T,), generator=gen) * (torch.arange(T) < n))
            groups.append(g)
    order = torch.randperm(len(groups), generator=gen)
    prompt_ids, response_ids = torch.stack(prompt_rows)[order], torch.stack(response_rows)[order]
    return Rollout(prompt_ids=prompt_ids, prompt_mask=prompt_ids != 0, response_ids=response_ids,
                   response_mask=response_ids != 0, sampler_logp=torch.zeros(len(groups), T),
                   texts=[""] * len(groups), group_ids=torch.tensor(groups)[order])


def _score_and_grad(scorer: Scorer, data: Rollout, weights: torch.Tensor):
    """logp, entropy and every parameter's gradient of sum(w * logp) over response tokens."""
    scorer.model.zero_grad()
    logp, entropy = scorer(data)
    (logp * weights * data.response_mask).sum().backward()
    grads = {n: p.grad.clone() for n, p in scorer.model.named_parameters()}
    return logp.detach(), entropy, grads


@pytest.mark.parametrize("shared_prefix,pack,micro_batch_size", [
    (True, None, None), (True, None, 6), (False, 0.1, None), (True, 0.1, None), (True, 0.05, 8)])
def test_the_layouts_give_the_plain_forwards_numbers_and_gradients(shared_prefix, pack,
                                                                 micro_batch_size):
    torch.manual_seed(0)
    model, data = tiny_model(), grouped_rollout()
    assert not (data.response_ids == 0).all(dim=1).any()  # every row has a response token
    weights = torch.randn(data.response_ids.shape)
    plain = _score_and_grad(Scorer(model, 0.7, micro_batch_size), data, weights)
    laid_out = _score_and_grad(Scorer(model, 0.7, micro_batch_size, shared_prefix=shared_prefix,
                                      pack=pack), data, weights)
    mask = data.response_mask
    torch.testing.assert_close(laid_out[0][mask], plain[0][mask], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(laid_out[1][mask], plain[1][mask], rtol=1e-5, atol=1e-6)
    assert laid_out[0].shape == plain[0].shape == mask.shape
    for name, want in plain[2].items():
        scale = float(want.abs().max())
        assert scale > 0, name  # every weight gets a gradient from the loss
        # A gradient entry is a sum over every token, so where terms cancel it is small beside
        # its rounding: the tolerance is 1e-5 of the tensor's own scale (measured: <= 5e-7).
        torch.testing.assert_close(laid_out[2][name], want, rtol=1e-5, atol=1e-5 * scale,
                                   msg=name)


def tiny_qwen2(seed: int = 0):
    """The tiny test Llama's shape as a Qwen2 (biased q/k/v, grouped keys and values)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=True)
    return Qwen2ForCausalLM(cfg).float()


def test_a_qwen2_model_gives_the_plain_numbers_too():
    model, data = tiny_qwen2(), grouped_rollout()
    weights = torch.randn(data.response_ids.shape)
    plain = _score_and_grad(Scorer(model, 1.0), data, weights)
    laid_out = _score_and_grad(Scorer(model, 1.0, shared_prefix=True, pack=0.1), data, weights)
    mask = data.response_mask
    torch.testing.assert_close(laid_out[0][mask], plain[0][mask], rtol=1e-5, atol=1e-6)
    for name, want in plain[2].items():
        torch.testing.assert_close(laid_out[2][name], want, rtol=1e-5,
                                   atol=1e-5 * float(want.abs().max()), msg=name)


def test_the_prompt_runs_once_per_distinct_prompt_and_its_gradient_flows_through_the_cache():
    """The prompt forward sees 4 rows (one per group), not 16; detaching the expanded cache
    changes the gradient, so the shared prefix is what carries it."""
    from src import shared_prefix as sp

    model, data = tiny_model(), grouped_rollout()
    widths = []
    real_run = sp.run_prompts

    def counted(m, ids, mask):
        widths.append(ids.shape[0])
        return real_run(m, ids, mask)

    sp.run_prompts, real_expand = counted, sp.expanded_cache
    try:
        weights = torch.randn(data.response_ids.shape)
        shared = _score_and_grad(Scorer(model, 1.0, shared_prefix=True), data, weights)
        sp.expanded_cache = lambda m, cache, rows: real_expand(
            m, [(k.detach(), v.detach()) for k, v, *_ in cache], rows)
        detached = _score_and_grad(Scorer(model, 1.0, shared_prefix=True), data, weights)
    finally:
        sp.run_prompts, sp.expanded_cache = real_run, real_expand
    assert widths[0] == len(PROMPT_LENGTHS)
    name = "model.layers.0.self_attn.k_proj.weight"
    assert not torch.allclose(shared[2][name], detached[2][name], rtol=1e-3, atol=0)


def test_buckets_are_the_fewest_within_the_padding_bound():
    lengths = [30, 29, 28, 10, 9, 9, 48, 47]
    # one bucket: 8 x 48 slots, 210 used -> 45% padding; three buckets by length reach 2.6%
    assert padding_share(lengths, [list(range(8))]) == pytest.approx(1 - 210 / 384)
    buckets = length_buckets(lengths, 0.1)
    assert sorted(sorted(b) for b in buckets) == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert padding_share(lengths, buckets) == pytest.approx(1 - 210 / (2 * 48 + 3 * 30 + 3 * 10))
    # a looser bound takes fewer buckets; every row lands in exactly one
    loose = length_buckets(lengths, 0.3)
    assert len(loose) == 2 and sorted(i for b in loose for i in b) == list(range(8))
    assert padding_share(lengths, loose) <= 0.3
    assert [b.tolist() for b in bucket_rows(torch.tensor(lengths), None)] == [list(range(8))]


def test_both_layouts_are_off_by_default():
    cfg = compose([])
    assert cfg.train.shared_prefix is False and cfg.train.pack is None
    scorer = Scorer(tiny_model())
    assert scorer.shared_prefix is False and scorer.pack is None


@pytest.mark.parametrize("overrides,message", [
    (["train.pack=1.5"], "train.pack must be in (0, 1)"),
    (["train.shared_prefix=true", "model.gradient_checkpointing=true"],
     "train.shared_prefix=true needs model.gradient_checkpointing=false"),
    (["train.shared_prefix=true", "train.compile=aot_eager"],
     "train.shared_prefix=true needs train.compile=none"),
])
def test_impossible_settings_are_refused_by_name(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compose(overrides)


def _all_partitions(items: list[int]):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _all_partitions(rest):
        for i in range(len(part)):
            yield part[:i] + [[first, *part[i]]] + part[i + 1:]
        yield [[first], *part]


@pytest.mark.parametrize("seed", range(6))
def test_no_partition_of_the_rows_needs_fewer_buckets_or_less_padding(seed):
    """Against every partition of 7 rows (877 of them), not only the length order's cuts."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 40, (7,), generator=gen).tolist()
    for bound in (0.05, 0.1, 0.3):
        got = length_buckets(lengths, bound)
        fits = [p for p in _all_partitions(list(range(7))) if padding_share(lengths, p) <= bound]
        fewest = min(len(p) for p in fits)
        assert len(got) == fewest and padding_share(lengths, got) <= bound
        least = min(padding_share(lengths, p) for p in fits if len(p) == fewest)
        assert padding_share(lengths, got) == pytest.approx(least)


@pytest.mark.parametrize("method", ["ppo", "bapo"])
@pytest.mark.parametrize("micro", [None, 4])
def test_an_update_through_the_trainer_gives_the_plain_gradient(method, micro):
    """The config keys reach the trainer's scorer: one update's gradient, loss and decision
    with train.shared_prefix=true and train.pack=0.1 against the plain forward's."""
    import copy

    from src.minibatches import MiniBatch
    from src.trainer import Trainer

    model, data = tiny_model(), grouped_rollout()
    behaviour = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in behaviour.parameters():
            p.add_(0.08 * torch.randn(p.shape, generator=gen))
        logp_b, ent_b = Scorer(behaviour)(data)
    advantages = torch.randn(data.size, generator=gen)
    results = []
    for layout in ([], ["train.shared_prefix=true", "train.pack=0.1"]):
        cfg = compose([f"method={method}", "train.prompts_per_step=4", "train.group_size=4",
                       f"rollout.max_new_tokens={T}", *layout])
        cfg.train.micro_batch_size = micro
        trainer = Trainer(cfg, model, None, None, None, None, None, None, None)
        assert trainer.scorer.shared_prefix == bool(layout)
        mb = MiniBatch(torch.arange(data.size), data, logp_b, ent_b, advantages, torch.zeros(data.size))
        model.zero_grad(set_to_none=True)
        done = trainer.update.gradient(mb, seed=5)
        assert done.skip_reason is None
        results.append((done, [p.grad.clone() for p in model.parameters()]))
    (plain, plain_grads), (laid_out, grads) = results
    for got, want in zip(grads, plain_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    assert float(laid_out.out.loss.detach()) == pytest.approx(float(plain.out.loss.detach()),
                                                             rel=1e-5, abs=1e-8)
    assert (laid_out.out.c_low, laid_out.out.c_high) == pytest.approx(
        (plain.out.c_low, plain.out.c_high), rel=1e-6)
