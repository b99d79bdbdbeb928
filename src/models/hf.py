"""Load real Hugging Face causal LMs (hub id or local directory) for GPU-scale runs."""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from src.model_dtypes import MODEL_DTYPES


def parse_dtype(dtype: str | torch.dtype) -> torch.dtype | str:
    """A `model.dtype` name or its alias (src/model_dtypes.py MODEL_DTYPES: `"bfloat16"`,
    `"bf16"`, ...) or a torch dtype -> torch dtype; `"auto"` passes through."""
    if isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    by_alias = {alias: name for name, alias in MODEL_DTYPES.items()}
    name = str(dtype).lower()
    name = by_alias.get(name, name)
    if name not in MODEL_DTYPES:
        names = sorted([*MODEL_DTYPES, *by_alias])
        raise ValueError(f"model.dtype must be one of {names} or 'auto', got {dtype!r}")
    return getattr(torch, name)


@contextlib.contextmanager
def _bars(show: bool):
    """transformers' progress bars on (as they are) or off, restored after."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    if show:
        yield
        return
    hf_logging.disable_progress_bar()
    # The GGUF conversion's bar is tqdm's own, outside transformers' switch.
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        gguf_utils = None
    bar = getattr(gguf_utils, "tqdm", None)
    if bar is not None:
        gguf_utils.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        if bar is not None:
            gguf_utils.tqdm = bar
        if was:
            hf_logging.enable_progress_bar()


def _looks_local(name_or_path: str) -> bool:
    # A hub id is "name" or "org/name"; anything else path-shaped is meant as a local path.
    return (
        Path(name_or_path).expanduser().exists()
        or name_or_path.startswith(("/", "./", "../", "~", "."))
        or name_or_path.count("/") > 1
        or "\\" in name_or_path
    )


def _load(name: str, torch_dtype, trust_remote_code: bool, gguf_file: str | None):
    kwargs = {"trust_remote_code": trust_remote_code}
    if gguf_file is not None:
        kwargs["gguf_file"] = gguf_file
    tokenizer = AutoTokenizer.from_pretrained(name, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(name, dtype=torch_dtype, **kwargs)
    return model, tokenizer


def _load_gguf_cached(name: str, gguf_file: str, torch_dtype, cache_dir: Path,
                      trust_remote_code: bool):
    """(model, tokenizer) of a GGUF file from its cache entry, written on the first load."""
    from src.models import gguf_cache

    digest = gguf_cache.file_digest(Path(name).expanduser() / gguf_file, cache_dir)
    key = gguf_cache.entry_key(digest, str(torch_dtype))
    entry = gguf_cache.entry_dir(cache_dir, key)
    if not gguf_cache.has_entry(entry):
        model, tokenizer = _load(name, torch_dtype, trust_remote_code, gguf_file)
        gguf_cache.save_entry(entry, key, model, tokenizer)
    # The first run, too, gets the model as the entry gives it back (a plain model, no GGUF
    # quantizer attached), so every run starts from the same object; named by its source.
    model, tokenizer = gguf_cache.load_entry(entry, torch_dtype)
    model.config._name_or_path = tokenizer.name_or_path = name
    return model, tokenizer


def load_hf_model(
    name_or_path: str | Path,
    *,
    dtype: str | torch.dtype = "float32",
    device: str | torch.device = "cpu",
    gradient_checkpointing: bool = False,
    trust_remote_code: bool = False,
    gguf_file: str | None = None,
    progress: bool = True,
    gguf_cache_dir: str | Path | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(model, tokenizer) from a hub id or a local `save_pretrained` directory.

    The tokenizer pads on the left (for generation) and falls back to EOS as its pad token.
    `gguf_file` loads a GGUF checkpoint in `name_or_path` (dequantized to `dtype`; needs the
    `gguf` package); transformers reads it in place. `gguf_cache_dir`: the dequantized model
    and its tokenizer are written there once and loaded from there after, the same tensors
    bit for bit (src/models/gguf_cache.py); None reads the GGUF file every time.
    `progress`: transformers' own bars (the GGUF conversion's, the weights') or none.
    """
    name = str(name_or_path)
    torch_dtype = parse_dtype(dtype)
    if _looks_local(name):
        path = Path(name).expanduser()
        if not path.exists():
            raise FileNotFoundError(
                f"model path {name!r} does not exist (resolved to {path.resolve()}); pass a "
                "directory written by save_pretrained or a hub id such as 'Qwen/Qwen2.5-0.5B'"
            )
        if path.is_dir() and gguf_file is None and not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"model path {name!r} has no config.json; is it a save_pretrained directory?"
            )
    try:
        with _bars(progress):
            if gguf_file is not None and gguf_cache_dir is not None:
                model, tokenizer = _load_gguf_cached(name, gguf_file, torch_dtype, Path(gguf_cache_dir),
                                                     trust_remote_code)
            else:
                model, tokenizer = _load(name, torch_dtype, trust_remote_code, gguf_file)
    except OSError as e:
        raise OSError(
            f"could not load model {name!r} (not a local directory, and not found on the "
            f"Hugging Face hub or in its local cache): {e}"
        ) from e
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.to(device)
    if gradient_checkpointing:
        # transformers 5 renamed it (the old name warns); 4.x only has the old one
        enable = getattr(model, "activation_checkpointing_enable", None)
        (enable or model.gradient_checkpointing_enable)()
        model.config.use_cache = False
    return model, tokenizer
