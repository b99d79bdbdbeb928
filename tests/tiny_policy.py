"""A tiny random Llama policy and a fixed ragged rollout, shared by the trainer-level tests
(micro-batching, precision) that need a real model but no warm start."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from src.rollout import Rollout

B, P, T, VOCAB = 8, 6, 10, 61  # responses, prompt width, response width, vocabulary


def tiny_model(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                      max_position_embeddings=64, tie_word_embeddings=True)
    return LlamaForCausalLM(cfg).float()


def tiny_rollout(seed: int = 1) -> Rollout:
    gen = torch.Generator().manual_seed(seed)
    prompt_lengths = [6, 3, 5, 2, 6, 4, 1, 5]
    response_lengths = [10, 4, 7, 1, 9, 3, 6, 8]
    prompt_mask = torch.tensor([[j >= P - n for j in range(P)] for n in prompt_lengths])
    response_mask = torch.tensor([[j < n for j in range(T)] for n in response_lengths])
    return Rollout(
        prompt_ids=torch.randint(1, VOCAB, (B, P), generator=gen) * prompt_mask,
        prompt_mask=prompt_mask,
        response_ids=torch.randint(1, VOCAB, (B, T), generator=gen) * response_mask,
        response_mask=response_mask,
        sampler_logp=torch.zeros(B, T), texts=[""] * B,
        group_ids=torch.arange(B) // 4)
