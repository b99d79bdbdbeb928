"""A GGUF model's dequantized weights, cached on disk so that only the first run reads the GGUF.

transformers parses a GGUF file's metadata three times (tokenizer, config, model) and
dequantizes every tensor in numpy: SmolLM2-135M-Instruct's Q4_1 file took 22-33 s to load on
a 2-core CPU. The result is a plain model whose weights are exact fp32 numbers, so it is
written once (safetensors weights, config, generation config and tokenizer, as
`save_pretrained` writes them) and later runs load that entry, which gives back the same
tensors bit for bit (tests/test_gguf_cache.py).

The entry is named by what decides those numbers: the sha256 of the GGUF file (itself
remembered by path, size and mtime, so the 100 MB are hashed once), the dtype, and the
versions of transformers and gguf that did the conversion. An entry is written to a
temporary directory and renamed into place, so a killed run leaves none half written.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import uuid
from pathlib import Path

# Bump when what an entry holds or how it is written changes.
FORMAT_VERSION = 1
DIGESTS = "digests.json"  # path -> {size, mtime_ns, sha256} of the GGUF files hashed here


def file_digest(path: Path, cache_dir: Path) -> str:
    """The sha256 of `path`, hashed once per (path, size, mtime) and remembered in
    `cache_dir/digests.json`."""
    path = Path(path).resolve()
    stat = path.stat()
    index_file = Path(cache_dir) / DIGESTS
    index = json.loads(index_file.read_text()) if index_file.is_file() else {}
    known = index.get(str(path))
    if known and known["size"] == stat.st_size and known["mtime_ns"] == stat.st_mtime_ns:
        return known["sha256"]
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    index[str(path)] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": h.hexdigest()}
    _write_atomically(index_file, json.dumps(index, indent=1, sort_keys=True) + "\n")
    return h.hexdigest()


def entry_key(digest: str, dtype: str) -> dict:
    """What decides an entry's numbers: the file, the dtype and the converting code."""
    return {"format": FORMAT_VERSION, "gguf_sha256": digest, "dtype": str(dtype),
            "transformers": importlib.metadata.version("transformers"),
            "gguf": importlib.metadata.version("gguf")}


def entry_dir(cache_dir: Path, key: dict) -> Path:
    name = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return Path(cache_dir) / f"{key['gguf_sha256'][:12]}-{name}"


def has_entry(entry: Path) -> bool:
    return (entry / "key.json").is_file()  # written last, inside the renamed directory


def load_entry(entry: Path, torch_dtype):
    """(model, tokenizer) of a written entry."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return (AutoModelForCausalLM.from_pretrained(entry, dtype=torch_dtype),
            AutoTokenizer.from_pretrained(entry))


def save_entry(entry: Path, key: dict, model, tokenizer) -> None:
    """Write `model` (its weights, config without the GGUF quantization note, generation
    config) and `tokenizer` as the entry `entry`, atomically; an entry another process
    finished first is kept."""
    from safetensors.torch import save_model

    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = entry.parent / f".tmp-{entry.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir()
        # The GGUF quantizer marks the model as not serializable, and a config that names
        # it would send the next load back to the GGUF file: the weights are plain tensors.
        config = model.config.to_dict()
        config.pop("quantization_config", None)
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        model.generation_config.save_pretrained(tmp)
        save_model(model, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        tokenizer.save_pretrained(tmp)
        (tmp / "key.json").write_text(json.dumps(key, indent=2, sort_keys=True) + "\n")
        try:
            os.rename(tmp, entry)
        except OSError:
            if not has_entry(entry):
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}")
    tmp.write_text(text)
    os.replace(tmp, path)
