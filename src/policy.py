"""Per-token log-probs and entropies of a rollout's responses under a model."""

from __future__ import annotations

import torch
from torch import Tensor

from src.algorithms import token_entropy
from src.rollout import Rollout


def response_logprobs(model: torch.nn.Module, batch: Rollout, *, with_entropy: bool = True
                      ) -> tuple[Tensor, Tensor | None]:
    """logp [B, T] of the sampled response tokens and entropy [B, T] of the full
    next-token distribution at each response position.

    Position ids follow the attention mask, as in HF generate with left padding, so the
    trainer scores exactly the context the sampler saw.
    """
    device = next(model.parameters()).device
    input_ids = torch.cat([batch.prompt_ids, batch.response_ids], dim=1).to(device)
    attention = torch.cat([batch.prompt_mask, batch.response_mask], dim=1).to(device)
    position_ids = (attention.long().cumsum(dim=1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention.long(),
                   position_ids=position_ids, use_cache=False).logits
    p_len, t_len = batch.prompt_ids.shape[1], batch.response_ids.shape[1]
    logits = logits[:, p_len - 1:p_len - 1 + t_len].float()
    targets = batch.response_ids.to(device)
    logp = torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None])[..., 0]
    entropy = token_entropy(logits.detach()) if with_entropy else None
    return logp, entropy
