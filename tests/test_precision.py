"""Mixed precision and device placement.

On CPU: log-probs and entropies of bf16 (and fp16) logits are fp32 and equal the fp32
computation; `model.autocast=bfloat16` runs every forward in bf16 with fp32 weights and
gradients, the trainer's update 0 stays on-policy bit for bit under it, and the
objectives create every tensor on their inputs' device. Marked `cuda` (skipped without
CUDA; `benchmarks/gpu_check.sh` runs them first on the GPU): the objectives, the trainer's
backward pass (with and without micro-batches), a whole run and the warm start with
`device=cuda`, where any tensor left on the wrong device raises.
"""

from __future__ import annotations

import copy
import inspect
import json

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from src.algorithms import METHODS as REGISTERED
from src.algorithms import policy_loss
from src.config import ConfigError
from src.minibatches import MiniBatch
from src.models.precision import autocast, autocast_forward
from src.policy import response_logprobs, sampled_logprobs
from src.run import execute
from src.trainer import Trainer
from tests.conftest import compose
from tests.tiny_policy import B, T, tiny_model, tiny_rollout

METHODS = sorted(REGISTERED)  # every registered method, so a new one is covered too
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _loss_inputs(device, seed: int = 0):
    """(logp, logp_b, advantages, mask, entropy) on `device`: ratios spread around 1,
    advantages of both signs; logp is a leaf that requires grad."""
    gen = torch.Generator().manual_seed(seed)
    logp_b = -torch.rand(B, T, generator=gen) * 3
    logp = logp_b + 0.4 * torch.randn(B, T, generator=gen)
    adv = torch.tensor([1.0, -1.0, -1.2, -0.5, 0.6, -1.5, -0.8, 0.0])
    entropy = torch.rand(B, T, generator=gen) * 2
    return (logp.to(device).requires_grad_(True), logp_b.to(device), adv.to(device),
            tiny_rollout().response_mask.to(device), entropy.to(device))


# --- log-probs of low-precision logits are fp32 --------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("chunk_elements", [2**26, 3 * 50])  # one chunk; 3 positions each
def test_logprobs_of_half_precision_logits_are_fp32(dtype, chunk_elements):
    gen = torch.Generator().manual_seed(0)
    logits = (4 * torch.randn(4, 7, 50, generator=gen)).to(dtype).requires_grad_(True)
    targets = torch.randint(0, 50, (4, 7), generator=gen)
    logp, entropy = sampled_logprobs(logits, targets, chunk_elements=chunk_elements)
    assert logp.dtype == torch.float32 and entropy.dtype == torch.float32
    exact = logits.detach().double()  # the same bf16 values, in fp64
    expected = torch.log_softmax(exact, -1).gather(-1, targets[..., None])[..., 0]
    assert torch.allclose(logp.double(), expected, atol=2e-6, rtol=0)
    log_p = torch.log_softmax(exact, -1)
    assert torch.allclose(entropy.double(), -(log_p.exp() * log_p).sum(-1), atol=2e-5, rtol=0)

    weights = torch.randn(4, 7, generator=gen)
    (logp * weights).sum().backward()
    assert logits.grad.dtype == dtype  # the gradient of the model's own logits
    onehot = torch.nn.functional.one_hot(targets, 50).double()
    want = (onehot - torch.softmax(exact, -1)) * weights.double()[..., None]
    # one rounding to the logits' dtype: 2^-8 (bf16) / 2^-11 (fp16) of the largest entry
    tol = (2**-8 if dtype == torch.bfloat16 else 2**-11) * float(want.abs().max())
    assert float((logits.grad.double() - want).abs().max()) <= tol


# --- bf16 autocast with fp32 weights ---------------------------------------------------


def test_autocast_forward_runs_bf16_matmuls_with_fp32_weights_and_grads():
    model = tiny_model()
    plain = copy.deepcopy(model)
    assert autocast_forward(model, "bfloat16") is model
    seen = []
    model.lm_head.register_forward_hook(lambda mod, args, out: seen.append(out.dtype))
    data = tiny_rollout()
    logp, entropy = response_logprobs(model, data)
    assert seen == [torch.bfloat16]
    assert logp.dtype == torch.float32 and entropy.dtype == torch.float32
    logp[data.response_mask].sum().backward()
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32
               for p in model.parameters())
    # close to the fp32 model, yet not equal to it: the matmuls really ran in bf16
    with torch.no_grad():
        logp32, _ = response_logprobs(plain, data)
    diff = (logp.detach() - logp32)[data.response_mask].abs()
    assert 0 < float(diff.max()) < 0.1


def test_autocast_forward_is_idempotent_keeps_the_signature_and_survives_deepcopy():
    model = tiny_model()
    assert autocast_forward(model, None) is model and "forward" not in vars(model)
    autocast_forward(model, "bfloat16")
    wrapped = model.forward
    autocast_forward(model, "bfloat16")
    assert model.forward.__func__ is wrapped.__func__  # not wrapped twice
    assert "logits_to_keep" in inspect.signature(model.forward).parameters  # HF generate asks
    twin = copy.deepcopy(model)
    assert twin.forward.__self__ is twin  # the copy runs its own weights
    with torch.no_grad():
        twin.lm_head.weight.zero_()
        ids = torch.tensor([[1, 2, 3]])
        assert float(twin(input_ids=ids).logits.abs().max()) == 0.0
        assert float(model(input_ids=ids).logits.abs().max()) > 0.0
    with pytest.raises(ValueError, match="model.autocast must be null or bfloat16"):
        autocast_forward(model, "float16")


class _WeightCasts(TorchDispatchMode):
    """Counts the bf16 copies made of the given tensors (autocast's casts of the weights)."""

    def __init__(self, tensors):
        super().__init__()
        self.pointers, self.count = {t.data_ptr() for t in tensors}, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if (func is torch.ops.aten._to_copy.default and kwargs.get("dtype") == torch.bfloat16
                and args[0].data_ptr() in self.pointers):
            self.count += 1
        return func(*args, **kwargs)


def test_decoding_under_autocast_casts_the_weights_once_a_call_with_the_same_numbers():
    from src.models import decoding

    model = autocast_forward(tiny_model(), "bfloat16").eval()
    prompts = torch.randint(3, 50, (4, 5), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(4, 5, dtype=torch.bool)
    steps = 6
    settings = dict(max_new_tokens=steps, eos_token_id=1, pad_token_id=0, temperature=1.0,
                    top_p=1.0, greedy=False, min_new_tokens=steps, with_entropy=True)
    outs, casts = {}, {}
    with torch.no_grad():
        for name, fn in (("one scope", decoding.decode), ("a scope a token", decoding._decode_loop)):
            counter = _WeightCasts(model.parameters())
            with counter:
                outs[name] = fn(model, prompts, mask, generator=torch.Generator().manual_seed(0),
                                **settings)
            casts[name] = counter.count
    linear_weights = sum(1 for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert casts == {"one scope": linear_weights, "a scope a token": linear_weights * steps}
    one, each = outs["one scope"], outs["a scope a token"]
    for field in ("tokens", "logp", "lengths", "entropy"):
        assert torch.equal(getattr(one, field), getattr(each, field)), field


def test_autocast_context_is_a_no_op_without_a_dtype():
    x = torch.randn(4, 4)
    with autocast("cpu", None):
        assert (x @ x).dtype == torch.float32
    with autocast("cpu", "bfloat16"):
        assert (x @ x).dtype == torch.bfloat16


def test_bad_autocast_value_is_a_config_error():
    with pytest.raises(ConfigError, match=r"^model.autocast must be null or bfloat16, got 'fp8'"):
        compose(["model.autocast=fp8"])


def test_update_zero_is_on_policy_under_autocast_and_the_step_moves_the_policy():
    model = autocast_forward(tiny_model(), "bfloat16")
    trainer = Trainer(compose(["method=ppo", "train.prompts_per_step=2", "train.group_size=4",
                               "rollout.max_new_tokens=12"]), model, None, None, None, None,
                      None, None, None)
    data = tiny_rollout()
    with torch.no_grad():
        logp_b, ent_b = trainer.scorer(data)
    adv = torch.tensor([1.0, -1.0, -1.2, -0.5, 0.6, -1.5, -0.8, 0.0])
    done = trainer.update.gradient(MiniBatch(torch.arange(B), data, logp_b, ent_b, adv, torch.zeros(B)),
                             on_policy=True)
    assert done.logp.dtype == torch.float32 == logp_b.dtype
    assert bool((done.out.ratio[data.response_mask] == 1).all())  # bit for bit
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())
    torch.optim.AdamW(model.parameters(), lr=1e-2).step()
    with torch.no_grad():
        after, _ = trainer.scorer(data)
    assert float((after - logp_b)[data.response_mask].abs().max()) > 1e-3


@pytest.mark.slow
def test_run_under_bf16_autocast_stays_on_policy_at_update_zero(tmp_path, smoke_overrides):
    """The behaviour pass and update 0 see the same weights under the same autocast, so
    their log-probs agree bit for bit; the rollout's sampler log-probs are fp32 and close."""
    cfg = compose([*smoke_overrides, "model.autocast=bfloat16", "model.sft.steps=20",
                   "method=bapo", "train.steps=2", "train.threads=1"])
    assert execute(cfg, tmp_path / "run") == "finished"
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    updates = [r for r in records if r["kind"] == "update"]
    assert [u["policy_lag"] for u in updates] == [0, 1, 0, 1]
    for u in updates:
        assert u["skipped"] is False
        if u["policy_lag"] == 0:
            assert u["abs_log_ratio_mean"] == 0.0 and u["clip_frac"] == 0.0
    steps = [r for r in records if r["kind"] == "step"]
    assert all(0 <= s["sampler_logp_gap"] < 0.05 for s in steps)  # HF scores vs autocast


def test_warm_start_under_autocast_is_its_own_cache_entry(tmp_path):
    from src.tasks import get_task
    from src.warm_start import cache_key, warm_start

    task = get_task("arithmetic", max_terms=2)
    model_cfg = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "tokenizer_corpus": 300}
    sft_cfg = {"steps": 3, "batch_size": 4, "eval_problems": 2, "eval_samples": 1,
               "max_new_tokens": 8, "pack_len": 0}
    plain_key = cache_key(task, model_cfg, sft_cfg, 0)
    assert cache_key(task, model_cfg, sft_cfg, 0, device="cpu", autocast=None) == plain_key
    assert cache_key(task, model_cfg, sft_cfg, 0, device="cuda") != plain_key
    model, _, info = warm_start(task, model_cfg, sft_cfg, tmp_path, seed=0, progress=False,
                                autocast="bfloat16")
    assert info["key"] == cache_key(task, model_cfg, sft_cfg, 0, autocast="bfloat16") != plain_key
    assert info["runtime"] == {"autocast": "bfloat16", "autocast_build_version": 2}
    assert all(p.dtype == torch.float32 for p in model.parameters())


def _sft_smoke():
    from src.tasks import get_task

    task = get_task("arithmetic", seed=0)
    model_cfg = {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "tokenizer_corpus": 2000}
    sft_cfg = {"steps": 40, "batch_size": 16, "lr": 3e-3, "warmup_steps": 5, "pack_len": 128,
               "eval_problems": 2, "eval_samples": 1, "max_new_tokens": 8}
    return task, model_cfg, sft_cfg


@pytest.mark.slow
def test_bf16_warm_start_learns_as_the_fp32_one_does(tmp_path):
    """The GPU check's plateau, at a size CPU runs in seconds: with one autocast context
    around the whole SFT, autocast's cache kept step 0's bf16 casts of every Linear weight,
    so only embeddings and norms learned (the loss stalled near 5.3 here; fp32 reaches 2.1).
    Each step's forward in its own context learns as fp32 does, within bf16 rounding."""
    from src.warm_start import warm_start

    task, model_cfg, sft_cfg = _sft_smoke()
    _, _, fp32 = warm_start(task, model_cfg, sft_cfg, tmp_path, seed=0, progress=False)
    _, _, bf16 = warm_start(task, model_cfg, sft_cfg, tmp_path, seed=0, progress=False,
                            autocast="bfloat16")
    assert fp32["sft_loss_final"] < 0.5 * fp32["sft_loss_first"]  # the recipe learns
    assert abs(bf16["sft_loss_first"] - fp32["sft_loss_first"]) < 0.01
    assert abs(bf16["sft_loss_final"] - fp32["sft_loss_final"]) < 0.05 * fp32["sft_loss_final"]


def test_no_autocast_is_no_context_at_all():
    """`autocast(device, None)` must not be a disabled torch.autocast: that counts as a
    nesting level, so a bf16 context inside it would keep its weight casts after exit and
    the next forward would read weights updated since as they were."""
    from src.models.tiny import build_tiny_model
    from src.models.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(["1+2=3", "4+5=9"] * 20, 320)
    model = build_tiny_model(tokenizer, hidden_size=32, num_layers=1, num_heads=2, seed=0)
    ids = tokenizer(["1+2=3"], return_tensors="pt")["input_ids"]
    with autocast("cpu", None):
        with autocast("cpu", "bfloat16"):
            before = model(ids).logits.float()
        with torch.no_grad():
            model.lm_head.weight.mul_(2.0)  # tied: the embedding doubles too
        with autocast("cpu", "bfloat16"):
            after = model(ids).logits.float()
    with autocast("cpu", "bfloat16"):
        fresh = model(ids).logits.float()
    assert not torch.equal(before, after)
    assert torch.equal(after, fresh)


def test_each_sft_step_under_autocast_sees_the_weights_of_the_step_before():
    """Step 1's reported loss equals a fresh autocast forward of the weights after step 0
    on batch 1 (the step-0 learning rate does not depend on the step count)."""
    from src.models.tiny import build_tiny_model
    from src.models.tokenizer import train_tokenizer
    from src.warm_start.settings import resolve_configs
    from src.warm_start.sft import _sft_loss, sft, sft_batch

    task, model_cfg, sft_cfg = _sft_smoke()
    tokenizer = train_tokenizer(task.corpus(model_cfg["tokenizer_corpus"]), 320)

    def fresh():
        return build_tiny_model(tokenizer, hidden_size=64, num_layers=2, num_heads=2, seed=0)

    _, two = resolve_configs(model_cfg, {**sft_cfg, "steps": 2})
    _, one = resolve_configs(model_cfg, {**sft_cfg, "steps": 1})
    losses = sft(fresh(), tokenizer, task, two, seed=0, progress=False, autocast="bfloat16")
    after_step_0 = fresh()
    sft(after_step_0, tokenizer, task, one, seed=0, progress=False, autocast="bfloat16")
    after_step_0.train()
    bsz = sft_cfg["batch_size"]
    batch = sft_batch(tokenizer, [task.problem(bsz + j) for j in range(bsz)],
                      pack_len=sft_cfg["pack_len"])
    with torch.no_grad(), autocast("cpu", "bfloat16"):
        fresh_loss = float(_sft_loss(after_step_0, batch, 0.0))
    assert losses[1] == pytest.approx(fresh_loss, abs=1e-5)
    assert abs(losses[1] - losses[0]) > 0.05  # step 0 moved the loss: the check can fail


# --- device placement ----------------------------------------------------------------

_FACTORIES = ("tensor", "as_tensor", "zeros", "ones", "full", "empty", "arange", "linspace",
              "rand", "randn", "randint", "randperm", "eye")


class _FactoryAudit(TorchFunctionMode):
    """Records tensor factories called without `device=`: on CUDA inputs they would make
    CPU tensors."""

    def __init__(self):
        super().__init__()
        self.missing = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") in _FACTORIES and getattr(func, "__module__", "") == "torch" \
                and "device" not in kwargs:
            self.missing.append(func.__name__)
        return func(*args, **kwargs)


@pytest.mark.parametrize("method", METHODS)
def test_objectives_create_every_tensor_on_their_inputs_device(method):
    cfg = compose([f"method={method}", "rollout.max_new_tokens=12"])
    logp, logp_b, adv, mask, entropy = _loss_inputs("cpu")
    audit = _FactoryAudit()
    with audit:
        out = policy_loss(method, logp, logp_b, adv, mask, entropy=entropy,
                          **cfg.method.kwargs(cfg.rollout.max_new_tokens))
        out.loss.backward()
    assert audit.missing == []
    if method == "bapo":
        assert out.metrics["bapo_steps"] > 0  # the search ran


def _all_tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _all_tensors(v)
    elif hasattr(obj, "__dataclass_fields__"):
        for name in obj.__dataclass_fields__:
            yield from _all_tensors(getattr(obj, name))


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("method", METHODS)
def test_objectives_on_cuda(method):
    cfg = compose([f"method={method}", "rollout.max_new_tokens=12"])
    params = cfg.method.kwargs(cfg.rollout.max_new_tokens)
    cpu_in = _loss_inputs("cpu")
    gpu_in = _loss_inputs("cuda")
    cpu = policy_loss(method, *cpu_in[:4], entropy=cpu_in[4], **params)
    gpu = policy_loss(method, *gpu_in[:4], entropy=gpu_in[4], **params)
    assert all(t.device.type == "cuda" for t in _all_tensors(gpu))
    gpu.loss.backward()
    assert gpu_in[0].grad.device.type == "cuda"
    assert (gpu.c_low, gpu.c_high) == (cpu.c_low, cpu.c_high)
    assert torch.allclose(gpu.loss.cpu(), cpu.loss.detach(), rtol=1e-5, atol=1e-7)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("micro", [None, 2])
@pytest.mark.parametrize("method", METHODS)
def test_trainer_backward_on_cuda_matches_cpu(method, micro):
    grads = {}
    for device in ("cpu", "cuda"):
        model = tiny_model().to(device)
        cfg = compose([f"method={method}", "train.prompts_per_step=2", "train.group_size=4",
                       "rollout.max_new_tokens=12"])
        cfg.train.micro_batch_size = micro
        trainer = Trainer(cfg, model, None, None, None, None, None, None, None)
        data = tiny_rollout()
        with torch.no_grad():
            logp_b, ent_b = trainer.scorer(data)
        logp_b = logp_b - 0.3 * torch.rand(logp_b.shape, generator=torch.Generator().manual_seed(0)).to(device)
        assert logp_b.device.type == device
        adv = torch.tensor([1.0, -1.0, -1.2, -0.5, 0.6, -1.5, -0.8, 0.0])
        mb = MiniBatch(torch.arange(B), data, logp_b, ent_b, adv, torch.zeros(B))
        done = trainer.update.gradient(mb)
        assert done.skip_reason is None
        assert done.logp.device.type == device and done.out.loss.device.type == device
        grads[device] = [p.grad.detach().cpu() for p in model.parameters()]
    for g, h in zip(grads["cuda"], grads["cpu"], strict=True):
        assert torch.allclose(g, h, rtol=1e-4, atol=1e-6 * float(h.abs().max()))


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("method", ["top_entropy", "bapo"])
def test_run_on_cuda_with_bf16_autocast(tmp_path, smoke_overrides, method):
    overrides = [*smoke_overrides, "device=cuda", "model.autocast=bfloat16", f"method={method}",
                 "train.micro_batch_size=2"]
    if method == "top_entropy":
        overrides.append("method.top_entropy.scope=rollout")  # the CPU-side selection path
    assert execute(compose(overrides), tmp_path / "run") == "finished"
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    updates = [r for r in records if r["kind"] == "update"]
    assert updates and all(u["skipped"] is False for u in updates)
    assert all(u["abs_log_ratio_mean"] == 0.0 for u in updates if u["policy_lag"] == 0)
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["device"].startswith("cuda")


@pytest.mark.cuda
@needs_cuda
def test_warm_start_trains_on_cuda(tmp_path):
    from src.tasks import get_task
    from src.warm_start import warm_start

    model, _, info = warm_start(
        get_task("arithmetic", max_terms=2), {"hidden_size": 32, "num_layers": 1, "num_heads": 2},
        {"steps": 5, "batch_size": 8, "eval_problems": 4, "eval_samples": 1, "max_new_tokens": 8},
        tmp_path, seed=0, progress=False, device="cuda", autocast="bfloat16")
    assert info["cache_hit"] is False
    assert info["runtime"] == {"device": "cuda", "autocast": "bfloat16", "autocast_build_version": 2}
    assert next(model.parameters()).device.type == "cuda"
