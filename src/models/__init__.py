"""Models and tokenizers: tiny from-scratch models with a cached SFT warm start, and real HF
models for GPU runs."""

from src.models.hf import load_hf_model
from src.models.sampling import Generation, generate
from src.models.tiny import build_tiny_model, num_parameters
from src.models.tokenizer import train_tokenizer
from src.models.warm_start import DEFAULT_MODEL_CFG, DEFAULT_SFT_CFG, cache_key, warm_start

__all__ = [
    "DEFAULT_MODEL_CFG",
    "DEFAULT_SFT_CFG",
    "Generation",
    "build_tiny_model",
    "cache_key",
    "generate",
    "load_hf_model",
    "num_parameters",
    "train_tokenizer",
    "warm_start",
]
