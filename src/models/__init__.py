"""Models and tokenizers: tiny from-scratch models and real HF models for GPU runs (the tiny
models' warm start, an SFT run before RL, is src/warm_start/)."""

from src.models.hf import load_hf_model
from src.models.sampling import Generation, generate
from src.models.tiny import build_tiny_model, num_parameters
from src.models.tokenizer import train_tokenizer

__all__ = [
    "Generation",
    "build_tiny_model",
    "generate",
    "load_hf_model",
    "num_parameters",
    "train_tokenizer",
]
