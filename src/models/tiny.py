"""Tiny Llama- or Qwen2-shaped causal LMs built from a config (random init, fp32)."""

from __future__ import annotations

import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen2Config,
    Qwen2ForCausalLM,
)

ARCHS = ("llama", "qwen2")


def build_tiny_model(
    tokenizer: PreTrainedTokenizerBase,
    *,
    arch: str = "llama",
    hidden_size: int = 256,
    num_layers: int = 4,
    num_heads: int = 4,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 256,
    tie_word_embeddings: bool = True,
    seed: int = 0,
) -> PreTrainedModel:
    """A randomly initialised causal LM sized to `tokenizer`; same seed => same weights.

    `intermediate_size` defaults to 8/3 * hidden_size rounded up to a multiple of 16 (the
    Llama ratio). The default shape (h256, 4 layers) has about 3.2M parameters.
    """
    if arch not in ARCHS:
        raise ValueError(f"model.arch must be one of {list(ARCHS)}, got {arch!r}")
    if hidden_size % num_heads:
        raise ValueError(
            f"model.hidden_size ({hidden_size}) must be divisible by model.num_heads ({num_heads})"
        )
    if intermediate_size is None:
        intermediate_size = -(-8 * hidden_size // 3 // 16) * 16
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        dtype="float32",
    )
    config = LlamaConfig(**common) if arch == "llama" else Qwen2Config(**common)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model_cls = LlamaForCausalLM if arch == "llama" else Qwen2ForCausalLM
        model = model_cls(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model.float()


def num_parameters(model: torch.nn.Module) -> int:
    """Unique parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())
