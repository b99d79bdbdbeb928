"""One protocol for every rollout backend (the HF model's own decode loop on CPU, vLLM on GPU)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor


@dataclass
class Rollout:
    """G samples per prompt, laid out group-major: rows [g*G, (g+1)*G) share prompt g."""

    prompt_ids: Tensor  # [B, P] left-padded
    prompt_mask: Tensor  # [B, P] bool
    response_ids: Tensor  # [B, T] right-padded with the pad id
    response_mask: Tensor  # [B, T] bool: tokens up to and including the first EOS
    sampler_logp: Tensor  # [B, T] float32, the sampler's own log-probs (0 on padding)
    texts: list[str]  # decoded responses, special tokens removed
    group_ids: Tensor  # [B] prompt index within the rollout
    # [B, T] float32, the entropy of the distribution each token was drawn from (0 on
    # padding); kept only under rollout.behaviour=sampler, else None
    sampler_entropy: Tensor | None = None

    @property
    def size(self) -> int:
        return self.response_ids.shape[0]

    def lengths(self) -> Tensor:
        return self.response_mask.sum(dim=1)

    def select(self, rows: Tensor) -> Rollout:
        """A sub-batch, trimmed to its own longest prompt and response (saves compute)."""
        prompt_mask = self.prompt_mask[rows]
        response_mask = self.response_mask[rows]
        p_keep = int(prompt_mask.any(dim=0).nonzero().min()) if prompt_mask.any() else 0
        t_keep = int(response_mask.any(dim=0).nonzero().max()) + 1 if response_mask.any() else 1
        return Rollout(
            prompt_ids=self.prompt_ids[rows][:, p_keep:],
            prompt_mask=prompt_mask[:, p_keep:],
            response_ids=self.response_ids[rows][:, :t_keep],
            response_mask=response_mask[:, :t_keep],
            sampler_logp=self.sampler_logp[rows][:, :t_keep],
            texts=[self.texts[i] for i in rows.tolist()],
            group_ids=self.group_ids[rows],
            sampler_entropy=None if self.sampler_entropy is None
            else self.sampler_entropy[rows][:, :t_keep],
        )


def needs_special_tokens(tokenizer, prompts: list[str]) -> bool:
    """Add BOS like the warm start and evaluator do, unless a chat template already did."""
    bos = getattr(tokenizer, "bos_token", None)
    return not (bos and all(p.startswith(bos) for p in prompts))


def encode_prompts(tokenizer, prompts: list[str]):
    """The prompts tokenized as the sampler feeds them: left-padded (input_ids,
    attention_mask), BOS added unless a chat template did; the tokenizer's own padding side
    is left as it was."""
    old_side, tokenizer.padding_side = tokenizer.padding_side, "left"
    try:
        return tokenizer(prompts, return_tensors="pt", padding=True,
                         add_special_tokens=needs_special_tokens(tokenizer, prompts))
    finally:
        tokenizer.padding_side = old_side


class RolloutBackend(Protocol):
    def generate(self, prompts: list[str], *, num_samples: int, max_new_tokens: int,
                 temperature: float, top_p: float, seed: int) -> Rollout: ...

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the sampler use the trainer's current weights (no-op when shared)."""
        ...

    def close(self) -> None: ...
