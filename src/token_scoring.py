"""Per-token log-probs and entropies of a rollout's responses under a model: one forward.

Memory: with a 152k vocabulary one fp32 copy of the logits costs 0.6 MB per token, so the
log-prob of the sampled token is taken as `logit[token] - logsumexp(logits)` by a custom
autograd function that works through the positions in chunks: the forward upcasts one
chunk at a time to fp32 (log-sum-exp and, without grad, the entropy), and the backward
recomputes the softmax chunk by chunk. Only the model's own logits (in the model's dtype)
are kept for the backward, instead of an fp32 copy plus a log-softmax output.

Temperature: the rollout samples from `softmax(logits / T)` (`rollout.temperature`), so the
behaviour pass, the old log-probs and the loss score that distribution, as verl and TRL
do (`logits.div_(temperature)` before the log-softmax): `temperature` divides each chunk's
upcast logits, and the backward carries its 1/T. At T = 1 nothing is divided, so the
numbers are today's bit for bit.

`Scorer` (src/policy.py) is how the trainer and the generation call these.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from src.algorithms import token_entropy
from src.rollout import Rollout

# fp32 elements per chunk of the [N, V] logits: 2**26 is 256 MiB (about 440 positions of a
# 152k vocabulary); small vocabularies get all positions in one chunk.
_CHUNK_ELEMENTS = 2**26


def _scaled(logits: Tensor, dtype: torch.dtype, temperature: float) -> Tensor:
    """`logits` upcast to `dtype`, divided by `temperature` (not at all at 1.0)."""
    up = logits.to(dtype)
    return up if temperature == 1.0 else up / temperature


class _SampledLogProb(torch.autograd.Function):
    """logp[n] = z[n, target[n]] - logsumexp(z[n]), z = logits / T, for logits [N, V],
    computed in fp32 (fp64 for fp64 logits) one chunk of `chunk` positions at a time."""

    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor, chunk: int, temperature: float) -> Tensor:
        dtype = torch.promote_types(logits.dtype, torch.float32)
        lse = torch.empty(logits.shape[0], dtype=dtype, device=logits.device)
        for start in range(0, logits.shape[0], chunk):
            lse[start:start + chunk] = torch.logsumexp(
                _scaled(logits[start:start + chunk], dtype, temperature), dim=-1)
        picked = _scaled(logits.gather(-1, targets[:, None])[:, 0], dtype, temperature)
        ctx.save_for_backward(logits, targets, lse)
        ctx.chunk, ctx.temperature = chunk, temperature
        return picked - lse

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        logits, targets, lse = ctx.saved_tensors
        grad = torch.empty_like(logits)
        t = ctx.temperature
        # d logp / d logits = (onehot(target) - softmax(logits / T)) / T
        g = grad_out.to(lse.dtype) if t == 1.0 else grad_out.to(lse.dtype) / t
        for start in range(0, logits.shape[0], ctx.chunk):
            end = start + ctx.chunk
            part = (_scaled(logits[start:end], lse.dtype, t) - lse[start:end, None]).exp_()
            part.mul_(-g[start:end, None]).scatter_add_(-1, targets[start:end, None], g[start:end, None])
            grad[start:end] = part
        return grad, None, None, None


def sampled_logprobs(logits: Tensor, targets: Tensor, *, with_entropy: bool = True,
                     chunk_elements: int = _CHUNK_ELEMENTS, temperature: float = 1.0
                     ) -> tuple[Tensor, Tensor | None]:
    """(logp, entropy) of `targets` [...] under `softmax(logits / temperature)` [..., V],
    both fp32 [...] (logp is fp64 for fp64 logits).

    Same values as `log_softmax(logits.float() / T).gather(...)` and `token_entropy` up to
    rounding; no full-size fp32 copy of the logits outlives a chunk. The entropy is detached.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    shape, vocab = targets.shape, logits.shape[-1]
    flat = logits.reshape(-1, vocab)
    index = targets.reshape(-1).to(logits.device)
    chunk = max(1, chunk_elements // vocab)
    logp = _SampledLogProb.apply(flat, index, chunk, float(temperature)).view(shape)
    if not with_entropy:
        return logp, None
    with torch.no_grad():
        entropy = torch.cat([token_entropy(_scaled(flat[s:s + chunk], torch.float32, temperature))
                             for s in range(0, flat.shape[0], chunk)])
    return logp, entropy.view(shape)


@functools.cache
def keeps_logits(model_type: type) -> bool:
    """Whether the model class's forward takes `logits_to_keep` (HF causal LMs since 4.50).

    Cached per class: it is asked on every scoring pass, and the answer cannot change.
    """
    try:
        return "logits_to_keep" in inspect.signature(model_type.forward).parameters
    except (TypeError, ValueError):
        return False


def response_logprobs(model: torch.nn.Module, batch: Rollout, *, with_entropy: bool = True,
                      temperature: float = 1.0, forward: Callable | None = None
                      ) -> tuple[Tensor, Tensor | None]:
    """logp [B, T] of the sampled response tokens and entropy [B, T] of the full
    next-token distribution at each response position, both of `softmax(logits / temperature)`
    (the rollout's sampling distribution).

    Position ids follow the attention mask, as in HF generate with left padding, so the
    trainer scores exactly the context the sampler saw. The LM head runs on the response
    positions only where the model allows it (`logits_to_keep`). `forward` stands for
    `model.forward` (a compiled one, `Scorer`); the model's own by default.
    """
    logits = response_logits(model, batch, forward)
    t_len = batch.response_ids.shape[1]
    targets = torch.nn.functional.pad(batch.response_ids.to(logits.device), (0, 1))
    logp, entropy = sampled_logprobs(logits, targets, with_entropy=with_entropy,
                                     temperature=temperature)
    return logp[:, :t_len], None if entropy is None else entropy[:, :t_len]


def response_logits(model: torch.nn.Module, batch: Rollout, forward: Callable | None = None
                    ) -> Tensor:
    """The model's logits [B, T + 1, V] at the positions that predict the response tokens
    (position p_len - 1 + t predicts response token t; the last one predicts nothing).

    Position ids follow the attention mask, as in HF generate with left padding. With
    `logits_to_keep` the LM head runs on these positions only and the output is contiguous,
    so nothing is copied."""
    device = next(model.parameters()).device
    input_ids = torch.cat([batch.prompt_ids, batch.response_ids], dim=1).to(device)
    attention = torch.cat([batch.prompt_mask, batch.response_mask], dim=1).to(device)
    position_ids = (attention.long().cumsum(dim=1) - 1).clamp(min=0)
    t_len = batch.response_ids.shape[1]
    kwargs = {"logits_to_keep": t_len + 1} if keeps_logits(type(model)) else {}
    logits = (forward or model)(input_ids=input_ids, attention_mask=attention.long(),
                                position_ids=position_ids, use_cache=False, **kwargs).logits
    return logits[:, -(t_len + 1):]
