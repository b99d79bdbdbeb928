"""Models: tokenizer, tiny model, sampling helper, cached warm start, HF loader."""

from __future__ import annotations

import json

import pytest
import torch

from src.models import (
    build_tiny_model,
    generate,
    load_hf_model,
    num_parameters,
    train_tokenizer,
)
from src.tasks import get_task
from src.warm_start import cache_key, resolve_configs, warm_start
from src.warm_start.sft import sft_batch

TINY_MODEL = {
    "hidden_size": 32,
    "num_layers": 1,
    "num_heads": 2,
    "intermediate_size": 64,
    "tokenizer_corpus": 300,
}
TINY_SFT = {
    "steps": 3,
    "batch_size": 8,
    "warmup_steps": 1,
    "eval_problems": 4,
    "eval_samples": 2,
    "max_new_tokens": 8,
}


@pytest.fixture(scope="module")
def task():
    return get_task("arithmetic", seed=0)


@pytest.fixture(scope="module")
def tok(task):
    return train_tokenizer(task.corpus(1000), 320)


def _weights_equal(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


# --- tokenizer -----------------------------------------------------------------------


def test_tokenizer_round_trips_and_splits_digits(tok, task):
    for text in [
        task.problem(0).prompt + task.problem(0).solution,
        "123+4567=4690, 4690+89=4779. Answer: 4779",
        "unseen text: héllo 😀\n",
    ]:
        ids = tok(text)["input_ids"]
        assert ids[0] == tok.bos_token_id
        assert tok.decode(ids, skip_special_tokens=True) == text
    ids = tok("90817263545463728190", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == list("90817263545463728190")
    # "Answer" is learned as one token, so responses stay short
    assert len(tok(" Answer:", add_special_tokens=False)["input_ids"]) == 2


def test_tokenizer_special_tokens_and_padding(tok, tmp_path):
    ids = {tok.pad_token_id, tok.bos_token_id, tok.eos_token_id}
    assert len(ids) == 3 and None not in ids
    assert tok.padding_side == "left"
    batch = tok(["1+2=?\n", "12+34+5=?\n"], padding=True, return_tensors="pt")
    assert batch["input_ids"][0, 0] == tok.pad_token_id
    assert batch["attention_mask"][0].tolist()[:4] == [0, 0, 0, 0]
    tok.save_pretrained(tmp_path)
    from transformers import PreTrainedTokenizerFast

    again = PreTrainedTokenizerFast.from_pretrained(tmp_path)
    text = "7+66=73. Answer: 73"
    assert again(text)["input_ids"] == tok(text)["input_ids"]
    assert again.eos_token_id == tok.eos_token_id


def test_tokenizer_is_deterministic(task):
    a = train_tokenizer(task.corpus(500), 300)
    b = train_tokenizer(task.corpus(500), 300)
    assert a.get_vocab() == b.get_vocab()
    with pytest.raises(ValueError, match="vocab_size"):
        train_tokenizer(["1+1"], 100)


# --- tiny model ----------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_default_tiny_model_size_and_seed(tok, arch):
    model = build_tiny_model(tok, arch=arch, seed=0)
    n = num_parameters(model)
    assert 2_000_000 <= n <= 10_000_000, n
    assert next(model.parameters()).dtype == torch.float32
    assert model.config.vocab_size == len(tok)
    assert model.config.eos_token_id == tok.eos_token_id
    assert _weights_equal(model, build_tiny_model(tok, arch=arch, seed=0))
    assert not _weights_equal(model, build_tiny_model(tok, arch=arch, seed=1))


def test_tiny_model_config_errors(tok):
    with pytest.raises(ValueError, match="model.arch"):
        build_tiny_model(tok, arch="gpt5")
    with pytest.raises(ValueError, match="divisible"):
        build_tiny_model(tok, hidden_size=30, num_heads=4)


# --- SFT batch and sampling ----------------------------------------------------------


def test_sft_batch_masks_prompt(tok, task):
    probs = [task.problem(i) for i in range(4)]
    b = sft_batch(tok, probs)
    for i, p in enumerate(probs):
        n_prompt = len(tok(p.prompt)["input_ids"])
        n_sol = len(tok(p.solution, add_special_tokens=False)["input_ids"]) + 1
        labels = b["labels"][i]
        assert (labels[:n_prompt] == -100).all()
        assert int((labels != -100).sum()) == n_sol
        assert int(b["attention_mask"][i].sum()) == n_prompt + n_sol
        kept = labels[labels != -100].tolist()
        assert kept[-1] == tok.eos_token_id
        assert tok.decode(kept, skip_special_tokens=True) == p.solution


def test_packed_sft_batch_gives_the_padded_loss(tok, task):
    model = build_tiny_model(tok, hidden_size=32, num_layers=2, num_heads=2, seed=0)
    probs = [task.problem(i) for i in range(12)]
    padded = sft_batch(tok, probs)
    packed = sft_batch(tok, probs, pack_len=100)
    assert packed["input_ids"].shape[0] < padded["input_ids"].shape[0]
    assert int((packed["labels"] != -100).sum()) == int((padded["labels"] != -100).sum())
    with torch.no_grad():
        a = model(**padded, use_cache=False).loss
        b = model(**packed, use_cache=False).loss
    assert torch.allclose(a, b, atol=1e-5), (a, b)  # packed problems do not see each other


def test_sampling_is_pure_ancestral(tok, monkeypatch):
    """HF's global default top_k=50 must not leak into sampling (the RL ratios need the
    sampler's distribution to be the model's)."""
    from transformers.generation import logits_process

    def boom(*args, **kwargs):
        raise AssertionError("a top-k/top-p warper was built")

    monkeypatch.setattr(logits_process.TopKLogitsWarper, "__init__", boom)
    monkeypatch.setattr(logits_process.TopPLogitsWarper, "__init__", boom)
    model = build_tiny_model(tok, hidden_size=32, num_layers=1, num_heads=2, seed=0)
    out = generate(model, tok, ["1+2=?\n"], num_samples=2, max_new_tokens=3, seed=0)
    assert len(out) == 2


def test_generate_is_seeded_and_prompt_major(tok):
    model = build_tiny_model(tok, hidden_size=32, num_layers=1, num_heads=2, seed=0)
    prompts = ["1+2=?\n", "12+34+5=?\n", "9+9=?\n"]
    state = torch.random.get_rng_state()
    a = generate(model, tok, prompts, num_samples=2, max_new_tokens=6, seed=3)
    assert torch.equal(torch.random.get_rng_state(), state)  # caller's RNG untouched
    b = generate(model, tok, prompts, num_samples=2, max_new_tokens=6, seed=3)
    assert a == b
    assert [(g.prompt_index, g.sample_index) for g in a] == [
        (i, j) for i in range(3) for j in range(2)
    ]
    for g in a:
        assert 1 <= len(g.token_ids) <= 6
        assert g.finished == (g.token_ids[-1] == tok.eos_token_id)
        assert g.text == tok.decode(g.token_ids, skip_special_tokens=True)
    c = generate(model, tok, prompts, num_samples=2, max_new_tokens=6, seed=4)
    assert [g.token_ids for g in a] != [g.token_ids for g in c]
    g1 = generate(model, tok, prompts, max_new_tokens=6, greedy=True)
    g2 = generate(model, tok, prompts, max_new_tokens=6, greedy=True, seed=9)
    assert g1 == g2


# --- warm start ----------------------------------------------------------------------


def test_warm_start_caches_and_reuses(task, tmp_path, capsys):
    m1, t1, info1 = warm_start(task, TINY_MODEL, TINY_SFT, tmp_path, seed=0, progress=False)
    assert info1["cache_hit"] is False
    # One line before the build: once, where it is cached, what it costs (from the config).
    m_cfg, s_cfg = resolve_configs(TINY_MODEL, TINY_SFT)
    assert capsys.readouterr().out.splitlines() == [
        f"warm start: building it once (tokenizer on {m_cfg['tokenizer_corpus']} texts, "
        f"{TINY_SFT['steps']} SFT steps of {TINY_SFT['batch_size']} sequences, eval on "
        f"{TINY_SFT['eval_problems']} problems); cached in {tmp_path / info1['key']} for every "
        "later run with this task and model"
    ]
    entry = tmp_path / info1["key"]
    assert info1["path"] == str(entry)
    assert (entry / "info.json").is_file() and (entry / "config.json").is_file()
    assert [p.name for p in tmp_path.iterdir()] == [info1["key"]]  # no temp dirs left
    on_disk = json.loads((entry / "info.json").read_text())
    assert len(on_disk["sft_losses"]) == TINY_SFT["steps"]
    for k in ("greedy_accuracy", "sampled_accuracy", "sft_loss_final", "by_difficulty"):
        assert k in on_disk
    assert 0.0 <= on_disk["sampled_accuracy"] <= 1.0
    mtime = (entry / "info.json").stat().st_mtime_ns

    m2, t2, info2 = warm_start(task, TINY_MODEL, TINY_SFT, tmp_path, seed=0, progress=False)
    assert info2["cache_hit"] is True and info2["key"] == info1["key"]
    assert capsys.readouterr().out == ""  # a cache hit builds nothing and says nothing
    assert (entry / "info.json").stat().st_mtime_ns == mtime
    assert _weights_equal(m1, m2)
    # the digest runs record: the sha256 of the weights file on disk, the same on a cache hit
    import hashlib
    on_file = hashlib.sha256((entry / "model.safetensors").read_bytes()).hexdigest()[:16]
    assert info1["weights_sha256"] == info2["weights_sha256"] == on_file
    assert t2("3+4=?\n")["input_ids"] == t1("3+4=?\n")["input_ids"]
    assert t2.padding_side == "left"

    # a different config (or seed) is a different cache entry
    other_sft = {**TINY_SFT, "steps": 4}
    assert cache_key(task, TINY_MODEL, other_sft, 0) != info1["key"]
    assert cache_key(task, TINY_MODEL, TINY_SFT, 1) != info1["key"]
    assert cache_key(get_task("arithmetic", seed=1), TINY_MODEL, TINY_SFT, 0) != info1["key"]
    # explicit defaults hash like omitted ones
    full_model, full_sft = resolve_configs(TINY_MODEL, TINY_SFT)
    assert cache_key(task, full_model, full_sft, 0) == info1["key"]
    _, _, info3 = warm_start(task, TINY_MODEL, other_sft, tmp_path, seed=0, progress=False)
    assert info3["cache_hit"] is False and info3["key"] != info1["key"]
    assert len(list(tmp_path.iterdir())) == 2


def test_build_notice_states_the_measured_default_time_only_for_the_default(tmp_path):
    from src.warm_start import MEASURED_DEFAULT_BUILD, build_notice

    default = build_notice(tmp_path, *resolve_configs({}, {}))
    assert default.startswith("warm start: building it once (tokenizer on 20000 texts, 350 SFT "
                              "steps of 32 sequences, eval on 256 problems; ")
    assert MEASURED_DEFAULT_BUILD in default
    assert MEASURED_DEFAULT_BUILD not in build_notice(tmp_path, *resolve_configs(TINY_MODEL, TINY_SFT))


def test_a_build_without_its_eval_has_the_same_weights_and_no_accuracies(task, tmp_path):
    # the shipped-build rebuild compares weights only and skips the eval (a tenth of its time)
    from src.warm_start.cache import build, weights_digest

    m_cfg, s_cfg = resolve_configs(TINY_MODEL, TINY_SFT)
    _, _, full = build(task, m_cfg, s_cfg, tmp_path / "full", seed=0, progress=False,
                       device="cpu", autocast=None, numerics="portable")
    _, _, bare = build(task, m_cfg, s_cfg, tmp_path / "bare", seed=0, progress=False,
                       device="cpu", autocast=None, numerics="portable", evaluate_after=False)
    assert weights_digest(tmp_path / "bare") == weights_digest(tmp_path / "full")
    assert bare["sft_losses"] == full["sft_losses"]
    assert "greedy_accuracy" in full and "greedy_accuracy" not in bare


def test_an_sft_stopped_after_k_steps_is_the_whole_sft_at_step_k(task, tok):
    # what a prefix rebuild relies on: the same schedule (warmup and cosine over all steps),
    # stopped. Checked independently of the stopped run's own numbers: the whole SFT's loss
    # at step K is the loss of the stopped model on step K's batch (the forward the whole run
    # made with the same weights), and stopping at the last step changes nothing.
    from src.warm_start.sft import _sft_loss, sft, step_batch

    cfg = {**resolve_configs(TINY_MODEL, TINY_SFT)[1], "steps": 4}

    def fresh():
        return build_tiny_model(tok, hidden_size=32, num_layers=1, num_heads=2,
                                intermediate_size=64, max_position_embeddings=256, seed=0)

    whole_model, stopped_model, last_model = fresh(), fresh(), fresh()
    whole = sft(whole_model, tok, task, cfg, seed=0, progress=False)
    stopped = sft(stopped_model, tok, task, cfg, seed=0, progress=False, stop_after=2)
    assert stopped == whole[:2] and len(whole) == 4
    stopped_model.train()
    with torch.no_grad():
        loss_at_2 = _sft_loss(stopped_model, step_batch(tok, task, cfg, 2), 0.0)
    assert float(loss_at_2) == whole[2]
    assert sft(last_model, tok, task, cfg, seed=0, progress=False, stop_after=4) == whole
    assert _weights_equal(last_model, whole_model)
    with pytest.raises(ValueError, match="stop_after=5: give 1 to sft.steps"):
        sft(fresh(), tok, task, cfg, seed=0, progress=False, stop_after=5)


def test_the_sft_data_digest_hashes_every_steps_batch(task, tok):
    import hashlib

    from src.warm_start.sft import data_digest, sft_batch

    cfg = {**resolve_configs(TINY_MODEL, TINY_SFT)[1], "steps": 2, "batch_size": 3,
           "pack_len": 0}
    h = hashlib.sha256()  # by hand: steps 0 and 1 are problems 0-2 and 3-5, padded rows
    for step, problems in ((0, [0, 1, 2]), (1, [3, 4, 5])):
        batch = sft_batch(tok, [task.problem(i) for i in problems])
        for name in ("attention_mask", "input_ids", "labels"):
            h.update(f"{step}:{name}:{tuple(batch[name].shape)}".encode())
            h.update(batch[name].numpy().astype("int64").tobytes())
    assert data_digest(tok, task, cfg) == h.hexdigest()[:16]
    # another batch size (other problems in each step) or another task seed moves it
    assert data_digest(tok, task, {**cfg, "batch_size": 4}) != h.hexdigest()[:16]
    assert data_digest(tok, get_task("arithmetic", seed=1), cfg) != h.hexdigest()[:16]


def test_warm_start_is_deterministic(task, tmp_path):
    m1, _, i1 = warm_start(task, TINY_MODEL, TINY_SFT, tmp_path / "a", seed=0, progress=False)
    m2, _, i2 = warm_start(task, TINY_MODEL, TINY_SFT, tmp_path / "b", seed=0, progress=False)
    assert i2["cache_hit"] is False
    assert _weights_equal(m1, m2)
    assert i1["sft_losses"] == i2["sft_losses"]


def test_warm_start_rejects_unknown_keys(task, tmp_path):
    with pytest.raises(ValueError, match="sft.stepz"):
        warm_start(task, TINY_MODEL, {"stepz": 3}, tmp_path, seed=0)
    with pytest.raises(ValueError, match="sft.lr"):
        warm_start(task, TINY_MODEL, {"lr": 0}, tmp_path, seed=0)
    assert not any(tmp_path.iterdir())


# --- HF loader -----------------------------------------------------------------------


def test_load_hf_model_missing_path_is_clear(tmp_path):
    missing = tmp_path / "no_such_model"
    with pytest.raises(FileNotFoundError, match="no_such_model"):
        load_hf_model(str(missing), dtype="float32", device="cpu")
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_hf_model(tmp_path, dtype="float32", device="cpu")
    with pytest.raises(ValueError, match="model.dtype"):
        load_hf_model(tmp_path, dtype="float8", device="cpu")


def test_load_hf_model_local_round_trip(tok, tmp_path):
    model = build_tiny_model(tok, hidden_size=32, num_layers=1, num_heads=2, seed=0)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded, ltok = load_hf_model(tmp_path, dtype="fp32", device="cpu", gradient_checkpointing=True)
    assert ltok.padding_side == "left" and ltok.pad_token_id == tok.pad_token_id
    assert getattr(loaded, "is_activation_checkpointing", None) or loaded.is_gradient_checkpointing
    ids = tok(["12+3=?\n"], return_tensors="pt")["input_ids"]
    model.eval()
    loaded.eval()
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, loaded(ids).logits)


def test_a_shipped_build_is_loaded_before_the_cache_and_nothing_is_built(task, tmp_path, capsys):
    import shutil

    cache, shipped = tmp_path / "cache", tmp_path / "shipped"
    _, _, built = warm_start(task, TINY_MODEL, TINY_SFT, cache, seed=0, progress=False)
    shutil.copytree(built["path"], shipped / built["key"])
    # another build of the same key in the cache (as another CPU made it): never used
    model_file = cache / built["key"] / "model.safetensors"
    model_file.write_bytes(model_file.read_bytes()[:-4] + b"\x00\x00\x00\x00")
    capsys.readouterr()
    _, _, info = warm_start(task, TINY_MODEL, TINY_SFT, cache, seed=0, progress=False,
                            shipped_dir=shipped)
    assert info["path"] == str(shipped / built["key"]) and info["cache_hit"] is True
    assert info["weights_sha256"] == built["weights_sha256"]
    assert capsys.readouterr().out == ""
    # without the shipped dir the cache's entry is what loads
    _, _, cached = warm_start(task, TINY_MODEL, TINY_SFT, cache, seed=0, progress=False,
                              shipped_dir=None)
    assert cached["path"] == str(cache / built["key"])
    assert cached["weights_sha256"] != built["weights_sha256"]


def test_a_gpu_run_loads_the_shipped_cpu_build_of_its_configs(task, tmp_path):
    """A shipped build is what the committed results started from, so a CUDA run of the
    same configs loads it (before any CUDA call) instead of building its own."""
    import shutil

    from src.warm_start import cache_key

    _, _, built = warm_start(task, TINY_MODEL, TINY_SFT, tmp_path / "cache", seed=0,
                             progress=False, shipped_dir=None)
    shipped = tmp_path / "shipped"
    shutil.copytree(built["path"], shipped / built["key"])
    assert cache_key(task, TINY_MODEL, TINY_SFT, 0, device="cuda") != built["key"]
    _, _, info = warm_start(task, TINY_MODEL, TINY_SFT, tmp_path / "empty", seed=0,
                            progress=False, device="cuda", shipped_dir=shipped)
    assert info["path"] == str(shipped / built["key"]) and info["cache_hit"] is True
    assert info["weights_sha256"] == built["weights_sha256"]


def test_a_cache_entry_of_another_numerics_mode_is_set_aside_not_used(task, tmp_path, capsys):
    _, _, built = warm_start(task, TINY_MODEL, TINY_SFT, tmp_path, seed=0, progress=False,
                             shipped_dir=None)
    entry = tmp_path / built["key"]
    info = json.loads((entry / "info.json").read_text())
    assert info["numerics"]["mode"] == "portable" and info["numerics"]["threads"] == 2
    del info["numerics"]  # as entries made before the mode existed: native, nothing pinned
    (entry / "info.json").write_text(json.dumps(info))
    capsys.readouterr()
    _, _, again = warm_start(task, TINY_MODEL, TINY_SFT, tmp_path, seed=0, progress=False,
                             shipped_dir=None)
    assert again["cache_hit"] is False and again["path"] == str(entry)
    assert "records no 'portable' numerics build; moved it to" in capsys.readouterr().out
    aside = [p for p in tmp_path.iterdir() if p.name.startswith(f"{built['key']}.set-aside-")]
    assert len(aside) == 1 and (aside[0] / "model.safetensors").is_file()  # kept, not deleted
    assert again["weights_sha256"] == built["weights_sha256"]


def test_the_build_runs_on_its_own_thread_count_whatever_the_runs(task, tmp_path):
    from src.warm_start import BUILD_THREADS

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _, _, one = warm_start(task, TINY_MODEL, TINY_SFT, tmp_path / "a", seed=0, progress=False)
        assert torch.get_num_threads() == 1  # the run's own count is put back
    finally:
        torch.set_num_threads(before)
    _, _, two = warm_start(task, TINY_MODEL, TINY_SFT, tmp_path / "b", seed=0, progress=False)
    assert one["torch_threads"] == two["torch_threads"] == BUILD_THREADS == 2
    assert one["weights_sha256"] == two["weights_sha256"]
