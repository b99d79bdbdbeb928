"""`train.shared_prefix`: each distinct prompt of a forward runs once, its responses on its
KV cache.

A rollout holds G responses per prompt and a pretrained model's prompt (chat template and
question) is longer than its response, so the plain forward (src/token_scoring.py) computes
each prompt G times. Here the rows whose prompt tokens (and left padding) are the same run
that prompt once, with the KV cache kept; the cache's keys and values are copied to the
rows by an `index_select` (whose backward sums the rows' gradients into the one prompt
forward, so the update's gradient reaches every weight through the shared prefix), and the
responses run on it: position ids and the attention mask continue the prompt's exactly as
the plain forward's (left-padded prompt, right-padded response, positions that follow the
mask). The first response token is predicted by the prompt's last position, the others by
the response forward.

The numbers are the plain forward's up to float rounding (other matmul shapes, another
attention split), not bit for bit: opt-in. It needs a model whose forward returns and takes
an HF cache (Llama, Qwen2 and the other HF causal LMs), no gradient checkpointing (a
checkpointed layer keeps no cache) and no torch.compile (not traced here).
"""

from __future__ import annotations

import functools
import inspect

import torch
import torch.nn.functional as F
from torch import Tensor

from src.packing import gather_buckets
from src.rollout import Rollout
from src.token_scoring import keeps_logits, sampled_logprobs


@functools.cache
def _cache_kwarg(model_type: type) -> str:
    """The forward's name for the KV cache: `cache` (transformers >= 5.x) or
    `past_key_values` (before, and still accepted as an alias until 5.40)."""
    try:
        params = inspect.signature(model_type.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def distinct_prompts(batch: Rollout, device) -> tuple[Tensor, Tensor, Tensor]:
    """(prompt ids [U, P], prompt mask [U, P], row -> its prompt [B]) of the rows' distinct
    prompts: two rows share one when their tokens and left padding are the same."""
    ids, mask = batch.prompt_ids.to(device), batch.prompt_mask.to(device)
    key = torch.cat([ids * mask, mask.long()], dim=1)
    unique, inverse = torch.unique(key, dim=0, return_inverse=True)
    width = ids.shape[1]
    return unique[:, :width], unique[:, width:].bool(), inverse


def run_prompts(model: torch.nn.Module, ids: Tensor, mask: Tensor) -> tuple[Tensor, object]:
    """(logits [U, V] of each prompt's last position, its KV cache) of one prompt forward."""
    position_ids = (mask.long().cumsum(dim=1) - 1).clamp(min=0)
    kwargs = {"logits_to_keep": 1} if keeps_logits(type(model)) else {}
    out = model(input_ids=ids, attention_mask=mask.long(), position_ids=position_ids,
                use_cache=True, **kwargs)
    cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
    if cache is None:
        raise RuntimeError(f"{type(model).__name__} returned no KV cache; train.shared_prefix "
                           "needs an HF causal LM without gradient checkpointing")
    return out.logits[:, -1], cache


def expanded_cache(model: torch.nn.Module, cache, rows: Tensor):
    """A fresh DynamicCache holding, for each of `rows`, its prompt's keys and values (an
    index_select per layer, so autograd carries the rows' gradients back to the prompt)."""
    from transformers import DynamicCache

    layers = [(keys.index_select(0, rows), values.index_select(0, rows))
              for keys, values, *_ in cache]
    return DynamicCache(ddp_cache_data=layers, config=getattr(model, "config", None))


def shared_prefix_logprobs(model: torch.nn.Module, batch: Rollout, buckets: list[Tensor], *,
                           with_entropy: bool, temperature: float
                           ) -> tuple[Tensor, Tensor | None]:
    """logp and entropy [B, T] of `batch`'s responses, as `response_logprobs` gives them, from
    one forward of its distinct prompts and one response forward per bucket of rows
    (`buckets`: row indices; one bucket of every row unless train.pack splits them). Each
    bucket's forward is as wide as its longest response; its other positions get 0."""
    device = next(model.parameters()).device
    ids, mask, prompt_of = distinct_prompts(batch, device)
    first_logits, cache = run_prompts(model, ids, mask)
    parts = [_score_responses(model, batch, rows.to(device), prompt_of[rows.to(device)],
                              first_logits, cache, with_entropy=with_entropy,
                              temperature=temperature) for rows in buckets]
    t_len = batch.response_ids.shape[1]
    logp = gather_buckets([lp for lp, _ in parts], buckets, t_len)
    entropy = gather_buckets([ent for _, ent in parts], buckets, t_len) if with_entropy else None
    return logp, entropy


def _score_responses(model, batch: Rollout, rows: Tensor, prompt_rows: Tensor, first_logits: Tensor,
                     cache, *, with_entropy: bool, temperature: float
                     ) -> tuple[Tensor, Tensor | None]:
    """logp and entropy [b, t] of `rows`' responses, t their longest, on their prompts' cache."""
    response_mask = batch.response_mask.to(rows.device)[rows]
    lengths = response_mask.sum(dim=1)
    t = max(1, int(lengths.max()))
    response_ids = batch.response_ids.to(rows.device)[rows, :t]
    attention = torch.cat([batch.prompt_mask.to(rows.device)[rows], response_mask[:, :t]], dim=1)
    position_ids = (attention.long().cumsum(dim=1) - 1).clamp(min=0)[:, -t:]
    kwargs = {"logits_to_keep": t} if keeps_logits(type(model)) else {}
    kwargs[_cache_kwarg(type(model))] = expanded_cache(model, cache, prompt_rows)
    logits = model(input_ids=response_ids, attention_mask=attention.long(),
                   position_ids=position_ids, use_cache=True, **kwargs).logits[:, -t:]
    # Response position s predicts token s + 1; the last predicts nothing (a dummy target,
    # dropped), and token 0 is predicted by the prompt's last position.
    targets = F.pad(response_ids[:, 1:], (0, 1))
    lp_rest, ent_rest = sampled_logprobs(logits, targets, with_entropy=with_entropy,
                                         temperature=temperature)
    lp_first, ent_first = sampled_logprobs(first_logits.index_select(0, prompt_rows),
                                           response_ids[:, 0], with_entropy=with_entropy,
                                           temperature=temperature)
    logp = torch.cat([lp_first[:, None], lp_rest[:, :t - 1]], dim=1)
    entropy = (torch.cat([ent_first[:, None], ent_rest[:, :t - 1]], dim=1)
               if with_entropy else None)
    return logp, entropy
