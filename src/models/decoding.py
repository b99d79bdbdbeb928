"""Batched decoding with a KV cache that drops each row from the batch once it has ended.

Why our own loop instead of HF `generate`: `generate` keeps every row decoding until the
longest response ends, runs input preparation, logits processors and stopping criteria
in Python at every step, and returns the sampler's log-probs only through
`output_scores`, which keeps a [B, V] copy per step. Here a row that emits EOS leaves the
batch and its KV cache (`Cache.batch_select_indices`), so the later decode steps run on the
rows still going, and the log-prob of each sampled token is taken from the logits the loop
already holds. Measured on the CPU default (128 responses of at most 64 tokens, the
3.2M-param warm start): on a machine busy with other jobs, one thread, 1.39 s per rollout
against 2.91 s for `generate` with `output_scores`; on the quiet machine, 2 threads, inside
the training step, 0.87 s against 1.27 s for stock TRL's `generate` (`benchmarks/bench_decoding.py` and
`benchmarks/bench_vs_trl.py` rerun both).

The sampling distribution is HF's, step for step: fp32 logits of the last position,
divided by `temperature` (skipped at 1.0, as HF does), HF's top-p filter (`TopPLogitsWarper`,
at least one token kept), `softmax`, one `torch.multinomial` draw; greedy decoding is the
`argmax` of the logits. Inputs are left-padded prompts; positions follow the attention
mask (`cumsum - 1`, 0 on padding) and advance by one per token, as in `generate`. What
differs is only the consumption of the random stream once a row has dropped out (fewer rows
per draw), so sampled tokens are not bit-identical to `generate`'s; greedy tokens are the
same (tested).
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

import torch
from torch import Tensor

from src.algorithms.entropy import token_entropy
from src.models.precision import autocast

try:  # transformers >= 4.56: caches are lists of layers
    from transformers.cache_utils import Cache, DynamicLayer
except ImportError:  # older: the model's own DynamicCache
    Cache = DynamicLayer = None


@dataclass(frozen=True)
class Decoded:
    tokens: Tensor  # [B, T] long: the response tokens, pad after the first EOS
    logp: Tensor  # [B, T] float32: the sampler's log-prob of each token (0 after EOS)
    lengths: Tensor  # [B] long: tokens generated per row, EOS included
    # [B, T] float32: the entropy of softmax(logits / T) at each token, as the trainer's
    # scoring pass defines it (no top-p, no EOS mask); None unless asked (`with_entropy`)
    entropy: Tensor | None = None


@functools.cache
def _forward_args(model_type: type) -> tuple[str, bool]:
    """(the forward's name for the KV cache, whether it takes `logits_to_keep`).

    transformers 5.x renamed `past_key_values` to `cache`; asked once per model class.
    """
    params = inspect.signature(model_type.forward).parameters
    return ("cache" if "cache" in params else "past_key_values"), "logits_to_keep" in params


class _PreallocatedLayer(DynamicLayer or object):
    """A KV-cache layer that writes each step's keys and values into a buffer sized for the
    whole response, instead of `DynamicLayer`'s `torch.cat` of the whole cache at every step.

    Why: with 128 rows the two cats per layer and step cost about 0.8 ms each on one CPU
    thread, more than half of the step's attention (1.3 ms); over a 64-token rollout they
    were 28% of the decode loop's CPU time (torch.profiler, the CPU default's rollout).
    Attention reads the same numbers through a view of the first `length` positions: the
    tokens and log-probs are bit-identical to `DynamicLayer`'s (tested).
    """

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity, self.length = capacity, 0

    def lazy_initialization(self, key_states: Tensor, value_states: Tensor) -> None:
        self.device = key_states.device
        rows, heads, _, dim = key_states.shape
        self.key_buffer = key_states.new_empty(rows, heads, self.capacity, dim)
        self.value_buffer = value_states.new_empty(rows, heads, self.capacity, value_states.shape[-1])
        self.is_initialized = True

    def update(self, key_states: Tensor, value_states: Tensor, *args, **kwargs) -> tuple[Tensor, Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"KV cache of {self.capacity} positions overflowed (needs {end})")
        self.key_buffer[:, :, self.length:end] = key_states
        self.value_buffer[:, :, self.length:end] = value_states
        self.length = end
        self.keys, self.values = self.key_buffer[:, :, :end], self.value_buffer[:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def batch_select_indices(self, indices: Tensor) -> None:
        # index_select copies whole rows: aten::index (`buffer[indices]`, as DynamicLayer
        # does) took 3x as long on a [128, 4, 80, 64] buffer (2.9-3.3 ms against 0.9-1.0 ms).
        if self.length:
            self.key_buffer = self.key_buffer.index_select(0, indices)
            self.value_buffer = self.value_buffer.index_select(0, indices)
            self.keys = self.key_buffer[:, :, :self.length]
            self.values = self.value_buffer[:, :, :self.length]


def _preallocated_cache(model: torch.nn.Module, capacity: int):
    """A cache of `_PreallocatedLayer`s for a model whose layers all attend to the full
    context; None (the model builds its own cache) otherwise or on older transformers."""
    config = getattr(model, "config", None)
    layers = getattr(config, "num_hidden_layers", None)
    if Cache is None or not isinstance(layers, int):
        return None
    if any(kind != "full_attention" for kind in (getattr(config, "layer_types", None) or [])):
        return None  # sliding-window layers keep a bounded window: not this cache's shape
    return Cache(layers=[_PreallocatedLayer(capacity) for _ in range(layers)])


def _repeated_rows(prompt_ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """(the first row of each run of identical consecutive prompt rows, the run of every
    row): a rollout repeats each prompt once per sample, and the prefill runs once per run.

    Why: the prefill's keys, values and last logits of a row depend on that row alone, so
    a prompt's copies share them; running it once per prompt instead of once per sample
    (16 rows instead of 128 in the CPU default's rollout) gave bit-identical logits and KV
    caches on 1 and 2 threads (tested through the whole loop).
    """
    rows = torch.cat([prompt_ids, mask], dim=1)
    starts = torch.ones(rows.shape[0], dtype=torch.bool, device=rows.device)
    starts[1:] = (rows[1:] != rows[:-1]).any(dim=1)
    return starts.nonzero()[:, 0], starts.long().cumsum(dim=0) - 1


def _top_p_filter(scores: Tensor, top_p: float) -> Tensor:
    """HF's `TopPLogitsWarper` (min_tokens_to_keep=1), transcribed so the kept set is the same."""
    sorted_logits, sorted_indices = torch.sort(scores, descending=False)
    cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove = cumulative <= (1 - top_p)
    remove[..., -1:] = False
    remove = remove.scatter(1, sorted_indices, remove)
    return scores.masked_fill(remove, -float("inf"))


def _check_sampling(max_new_tokens: int, temperature: float, top_p: float, greedy: bool) -> None:
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if not greedy and temperature <= 0:
        raise ValueError(f"temperature must be > 0 for sampling, got {temperature}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")


def _prefill(model: torch.nn.Module, prompt_ids: Tensor, mask: Tensor, positions: Tensor,
             use_mask: bool, capacity: int, cache_arg: str, keeps_logits: bool):
    """The prompts' forward, once per run of identical rows: (each row's last logits in fp32,
    the KV cache with one entry per row)."""
    batch = prompt_ids.shape[0]
    extra = {"logits_to_keep": 1} if keeps_logits else {}
    cache = _preallocated_cache(model, capacity)
    if cache is not None:
        extra[cache_arg] = cache
    prompt_ids = prompt_ids.to(mask.device)
    first, copies = _repeated_rows(prompt_ids, mask)
    out = model(input_ids=prompt_ids[first], attention_mask=mask[first] if use_mask else None,
                position_ids=positions[first], use_cache=True, **extra)
    cache = getattr(out, cache_arg)
    # Indexing copies: a view would keep the prefill's whole logits alive through the loop.
    logits = out.logits[:, -1].to(torch.float32)[copies]
    del out
    if first.numel() < batch:
        cache.batch_select_indices(copies)  # each prompt's cache, once per copy of the prompt
    return logits, cache


def _draw(logits: Tensor, no_eos: bool, eos_token_id: int, *, greedy: bool, temperature: float,
          top_p: float, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """The next token of each row (argmax, or a draw from softmax(logits / T) after top-p)
    and its log-prob under the distribution it was drawn from. `no_eos`: EOS is masked out
    (in `logits` itself, as before the draw)."""
    scores = logits
    if no_eos:
        scores[:, eos_token_id] = -float("inf")
    if greedy:
        token = scores.argmax(dim=-1)
    else:
        if temperature != 1.0:
            scores = scores / temperature
        if top_p < 1.0:
            scores = _top_p_filter(scores, top_p)
        token = torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=generator)[:, 0]
    logp = torch.log_softmax(scores, dim=-1).gather(-1, token[:, None])[:, 0]
    return token, logp


@torch.no_grad()
def decode(model: torch.nn.Module, prompt_ids: Tensor, prompt_mask: Tensor, *,
           max_new_tokens: int, eos_token_id: int, pad_token_id: int,
           temperature: float = 1.0, top_p: float = 1.0, greedy: bool = False,
           min_new_tokens: int = 0, generator: torch.Generator | None = None,
           with_entropy: bool = False) -> Decoded:
    """Sample (or greedily decode) up to `max_new_tokens` tokens after each left-padded
    prompt row; a row ends at its first EOS.

    `generator`: the random stream of the draws (None: torch's default generator).
    `min_new_tokens`: EOS is masked out (logit -inf) before that many tokens, like HF's
    `MinNewTokensLengthLogitsProcessor`; for timing fixed-length responses.
    `with_entropy`: also the entropy of each step's distribution (`rollout.behaviour=sampler`
    stores it as the behaviour entropy); the tokens and log-probs are the same either way.
    """
    _check_sampling(max_new_tokens, temperature, top_p, greedy)
    # Under `model.autocast` each forward opens its own autocast scope (precision.py); one scope
    # held over the whole loop nests them, so the bf16 copies of the weights are cast once a call
    # instead of once a token. The same casts, the same numbers: only the time changes.
    with autocast(prompt_ids.device, getattr(model, "autocast_name", None)):
        return _decode_loop(model, prompt_ids, prompt_mask, max_new_tokens=max_new_tokens,
                            eos_token_id=eos_token_id, pad_token_id=pad_token_id,
                            temperature=temperature, top_p=top_p, greedy=greedy,
                            min_new_tokens=min_new_tokens, generator=generator,
                            with_entropy=with_entropy)


def _decode_loop(model: torch.nn.Module, prompt_ids: Tensor, prompt_mask: Tensor, *,
                 max_new_tokens: int, eos_token_id: int, pad_token_id: int, temperature: float,
                 top_p: float, greedy: bool, min_new_tokens: int,
                 generator: torch.Generator | None, with_entropy: bool) -> Decoded:
    cache_arg, keeps_logits = _forward_args(type(model))
    device = prompt_ids.device
    batch = prompt_ids.shape[0]
    tokens = torch.full((batch, max_new_tokens), pad_token_id, dtype=torch.long)
    logps = torch.zeros(batch, max_new_tokens)
    lengths = torch.full((batch,), max_new_tokens, dtype=torch.long)
    entropies = torch.zeros(batch, max_new_tokens) if with_entropy else None

    mask = prompt_mask.long().to(device)
    positions = (mask.cumsum(dim=-1) - 1).masked_fill(mask == 0, 0)
    # As `generate` does: no padding at all, no mask (the attention takes its causal path).
    use_mask = not bool((mask == 1).all())
    logits, cache = _prefill(model, prompt_ids, mask, positions, use_mask,
                             prompt_ids.shape[1] + max_new_tokens, cache_arg, keeps_logits)
    next_position = positions[:, -1:] + 1
    rows = torch.arange(batch)  # original row of each row still decoding
    for step in range(max_new_tokens):
        if entropies is not None:  # before the draw, which may mask EOS in `logits` in place
            entropies[rows, step] = token_entropy(
                logits if temperature == 1.0 else logits / temperature).cpu()
        token, logp = _draw(logits, step < min_new_tokens, eos_token_id, greedy=greedy,
                            temperature=temperature, top_p=top_p, generator=generator)
        token_cpu = token.cpu()
        tokens[rows, step] = token_cpu
        logps[rows, step] = logp.cpu()
        if step + 1 == max_new_tokens:
            break
        ended = token_cpu == eos_token_id
        if bool(ended.any()):
            lengths[rows[ended]] = step + 1
            keep = (~ended).nonzero()[:, 0]
            if keep.numel() == 0:
                break
            rows, keep = rows[keep], keep.to(device)
            token, mask, next_position = token[keep], mask[keep], next_position[keep]
            cache.batch_select_indices(keep)
        if use_mask:
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
        logits = model(input_ids=token[:, None], attention_mask=mask if use_mask else None,
                       position_ids=next_position, use_cache=True,
                       **{cache_arg: cache}).logits[:, -1].to(torch.float32, copy=True)
        next_position = next_position + 1
    return Decoded(tokens, logps, lengths, entropies)
