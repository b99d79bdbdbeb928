"""The warm start's cache: its key, the shipped builds, and the build of an entry when none
is there (tokenizer, random init, SFT, eval), written atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerFast

from src.models.precision import autocast as autocast_context
from src.models.tiny import build_tiny_model, num_parameters
from src.models.tokenizer import train_tokenizer
from src.tasks.base import Task
from src.warm_start.evaluate import evaluate
from src.warm_start.settings import resolve_configs
from src.warm_start.sft import sft

# Bump when the SFT recipe changes in a way that changes the weights for the same config.
# 2: packed SFT batches.
WARM_START_VERSION = 2
# Bump when only autocast builds change (it is in their keys alone, so the fp32 builds and
# the shipped ones keep theirs). 2: each SFT step's forward in its own autocast context;
# the builds before it trained only their embeddings and norms (src/warm_start/sft.py).
AUTOCAST_BUILD_VERSION = 2
# The SFT's CPU threads, fixed: the shipped builds were made with 2 (a build with another
# count rounds its reductions otherwise and gives other weights).
BUILD_THREADS = 2
SHIPPED_DIR = Path(__file__).resolve().parents[2] / "experiments" / "warm_starts"


def _runtime(device: torch.device | str, autocast_name: str | None,
             numerics: str = "portable") -> dict[str, Any]:
    """What besides the configs changes the SFT's numbers; empty for the CPU fp32 portable
    default, so the default's cache keys are those of earlier versions (and of the shipped
    builds). A native build's key names its mode: its weights depend on the CPU."""
    runtime = {}
    if torch.device(device).type != "cpu":
        runtime["device"] = torch.device(device).type
    if autocast_name is not None:
        runtime["autocast"] = autocast_name
        runtime["autocast_build_version"] = AUTOCAST_BUILD_VERSION
    if numerics != "portable" and torch.device(device).type == "cpu":
        runtime["numerics"] = numerics
    return runtime


def cache_key(task: Task, model_cfg: dict[str, Any], sft_cfg: dict[str, Any], seed: int,
              *, device: torch.device | str = "cpu", autocast: str | None = None,
              numerics: str = "portable") -> str:
    m, s = resolve_configs(model_cfg, sft_cfg)
    if float(s["label_smoothing"]) == 0.0:  # the key every build made before it existed had
        s = {k: v for k, v in s.items() if k != "label_smoothing"}
    payload = {
        "version": WARM_START_VERSION,
        "task": dict(task.config),
        "model": m,
        "sft": s,
        "seed": int(seed),
    }
    runtime = _runtime(device, autocast, numerics)
    if runtime:
        payload["runtime"] = runtime
    blob = json.dumps(payload, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def warm_start(
    task: Task,
    model_cfg: dict[str, Any],
    sft_cfg: dict[str, Any],
    cache_dir: Path,
    *,
    seed: int,
    progress: bool = True,
    device: torch.device | str = "cpu",
    autocast: str | None = None,
    numerics: str = "portable",
    shipped_dir: Path | None = SHIPPED_DIR,
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast, dict[str, Any]]:
    """Return (model, tokenizer, info): the shipped build of this key when there is one (on
    any device: a shipped build is CPU-made), else from the cache when present, else trained
    and cached.

    `info["cache_hit"]` says whether nothing was built; `info["path"]` is the entry loaded.
    The model is fp32 in eval mode, on `device` when it was trained here and on CPU when it
    was loaded. SFT (on `device`, under `autocast` when given, on `BUILD_THREADS` threads)
    uses training problems `0 .. steps*batch_size - 1` (`info["next_train_index"]` is the
    first unused one). `numerics` is the mode torch loaded in (src/_numerics.py).
    """
    m_cfg, s_cfg = resolve_configs(model_cfg, sft_cfg)
    key = cache_key(task, m_cfg, s_cfg, seed, device=device, autocast=autocast, numerics=numerics)
    # A shipped build is the weights the committed results started from, so a run on a GPU
    # loads it too (the CPU key of the same configs and autocast): the GPU reruns the
    # committed setup instead of building another warm start with the GPU's rounding.
    shipped_key = key if torch.device(device).type == "cpu" else cache_key(
        task, m_cfg, s_cfg, seed, device="cpu", autocast=autocast, numerics="portable")
    if shipped_dir is not None and (Path(shipped_dir) / shipped_key / "info.json").is_file():
        return _load(Path(shipped_dir) / shipped_key, cache_hit=True)
    cache_dir = Path(cache_dir)
    final = cache_dir / key
    if (final / "info.json").is_file():
        if torch.device(device).type != "cpu" or _built_in(final) == numerics:
            return _load(final, cache_hit=True)
        aside = set_aside(final)  # made before its mode was recorded: maybe another rounding
        print(f"warm start: {final} records no {numerics!r} numerics build; moved it to "
              f"{aside} and building it again", flush=True)
    return build(task, m_cfg, s_cfg, final, seed=seed, progress=progress, device=device,
                 autocast=autocast, numerics=numerics)


def build(task: Task, m_cfg: dict[str, Any], s_cfg: dict[str, Any], final: Path, *, seed: int,
          progress: bool, device: torch.device | str, autocast: str | None, numerics: str,
          evaluate_after: bool = True, stop_after: int | None = None,
          ) -> tuple[PreTrainedModel, PreTrainedTokenizerFast, dict[str, Any]]:
    """Train the warm start of resolved configs into the entry `final` (written atomically).
    `evaluate_after=False` leaves out the held-out eval (and its accuracies from info.json):
    a rebuild that only compares weights needs none of it. `stop_after=K` stops the SFT
    after its first K steps (src/warm_start/sft.py): the entry is then no warm start, only
    what a prefix rebuild compares, and its info.json says `sft_stopped_after`."""
    key = final.name
    print(build_notice(final, m_cfg, s_cfg), flush=True)
    tokenizer = train_tokenizer(task.corpus(int(m_cfg["tokenizer_corpus"])), m_cfg["vocab_size"])
    shape = ("arch", "hidden_size", "num_layers", "num_heads", "intermediate_size",
             "max_position_embeddings", "tie_word_embeddings")
    model = build_tiny_model(tokenizer, **{k: m_cfg[k] for k in shape}, seed=seed).to(device)
    losses, metrics, measured = _sft_and_eval(model, tokenizer, task, s_cfg, seed=seed,
                                              progress=progress, device=device, autocast=autocast,
                                              evaluate_after=evaluate_after,
                                              stop_after=stop_after)
    tail = losses[-max(1, len(losses) // 10) :]
    info: dict[str, Any] = {
        "key": key,
        "version": WARM_START_VERSION,
        "task": dict(task.config),
        "model": m_cfg,
        "sft": s_cfg,
        "seed": int(seed),
        "runtime": _runtime(device, autocast, numerics),
        "numerics": measured["numerics"],
        "num_parameters": num_parameters(model),
        "vocab_size": len(tokenizer),
        "sft_loss_first": losses[0],
        "sft_loss_final": sum(tail) / len(tail),  # mean over the last 10% of steps
        "sft_losses": losses,
        "sft_seconds": measured["sft_seconds"],
        # CPU time summed over threads. Wall time on a shared machine depends on the other
        # jobs; with one thread this is a load-independent measure of the work (with more,
        # threads spin while waiting for each other and inflate it under contention).
        "sft_cpu_seconds": measured["sft_cpu_seconds"],
        "eval_seconds": measured["eval_seconds"],
        "next_train_index": int(s_cfg["steps"]) * int(s_cfg["batch_size"]),
        **metrics,
        **({} if stop_after is None else {"sft_stopped_after": int(stop_after)}),
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "torch_threads": BUILD_THREADS,
        "machine": platform.machine(),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    _save_atomically(final, model, tokenizer, info)
    model.eval()
    return model, tokenizer, {**info, "cache_hit": False, "path": str(final),
                              "weights_sha256": weights_digest(final)}


def _sft_and_eval(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, task: Task,
                  s_cfg: dict[str, Any], *, seed: int, progress: bool, device: torch.device | str,
                  autocast: str | None, evaluate_after: bool, stop_after: int | None = None,
                  ) -> tuple[list[float], dict[str, Any], dict[str, Any]]:
    """The SFT, then the eval (unless `evaluate_after` is off), both on `BUILD_THREADS`
    threads (the eval too, so that info.json is the same) under `autocast`: (losses, eval
    metrics, the build's numerics fingerprint and timings)."""
    from src._numerics import fingerprint

    run_threads = torch.get_num_threads()
    torch.set_num_threads(BUILD_THREADS)
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        losses = sft(model, tokenizer, task, s_cfg, seed=seed, progress=progress,
                     autocast=autocast, stop_after=stop_after)
        _synchronize(device)
        measured = {"sft_seconds": time.perf_counter() - t0,
                    "sft_cpu_seconds": time.process_time() - c0,
                    "numerics": fingerprint(threads=BUILD_THREADS)}
        t0 = time.perf_counter()
        metrics: dict[str, Any] = {}
        if evaluate_after:
            with autocast_context(device, autocast):
                metrics = evaluate(
                    model,
                    tokenizer,
                    task,
                    task.eval_problems(int(s_cfg["eval_problems"])),
                    num_samples=int(s_cfg["eval_samples"]),
                    temperature=float(s_cfg["eval_temperature"]),
                    max_new_tokens=int(s_cfg["max_new_tokens"]),
                    seed=seed,
                    progress=progress,
                )
    finally:
        torch.set_num_threads(run_threads)
    measured["eval_seconds"] = time.perf_counter() - t0
    return losses, metrics, measured


def _synchronize(device: torch.device | str) -> None:
    """Wait for queued CUDA work, so that the timings above measure it."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


# Measured, not estimated: the default build (350 SFT steps of 32 sequences, h256 x 4
# layers) took 101 s of SFT plus 14 s of eval with 2 threads on a 2-core CPU
# (sft_seconds / eval_seconds in its info.json).
MEASURED_DEFAULT_BUILD = "the default build took about 2 min when measured on a 2-core CPU"


def build_notice(entry: Path, model_cfg: dict[str, Any], sft_cfg: dict[str, Any]) -> str:
    """One line before the build: what is built, that it happens once, where, and its cost."""
    cost = (f"tokenizer on {model_cfg['tokenizer_corpus']} texts, {sft_cfg['steps']} SFT steps "
            f"of {sft_cfg['batch_size']} sequences, eval on {sft_cfg['eval_problems']} problems")
    default = (model_cfg, sft_cfg) == resolve_configs({}, {})
    measured = f"; {MEASURED_DEFAULT_BUILD}" if default else ""
    return (f"warm start: building it once ({cost}{measured}); cached in {entry} for every "
            "later run with this task and model")



def _save_atomically(
    final: Path, model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, info: dict
) -> None:
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "info.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / "info.json").is_file():
                raise
            # Another process finished the same entry first; theirs is identical.
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _built_in(entry: Path) -> str:
    """The numerics mode a cache entry was built in; entries made before the mode existed
    record none and count as native (nothing was pinned)."""
    info = json.loads((entry / "info.json").read_text())
    return (info.get("numerics") or {}).get("mode", "native")


def set_aside(entry: Path) -> Path:
    """Move a cache entry out of the way (kept, never deleted); returns where it went."""
    aside = entry.with_name(f"{entry.name}.set-aside-{time.strftime('%Y%m%d-%H%M%S')}-"
                            f"{uuid.uuid4().hex[:6]}")
    os.rename(entry, aside)
    return aside


def weights_digest(path: Path) -> str:
    """The first 16 hex digits of the sha256 of the entry's weights file(s).

    The cache key names the build's inputs, not its output: SFT on another CPU rounds
    differently (builds of one key on two machines differed by 0.03 in greedy accuracy), so
    runs record this digest to show which build they started from."""
    h = hashlib.sha256()
    for f in sorted(Path(path).glob("*.safetensors")):
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _load(path: Path, *, cache_hit: bool) -> tuple[PreTrainedModel, PreTrainedTokenizerFast, dict]:
    info = json.loads((path / "info.json").read_text())
    tokenizer = PreTrainedTokenizerFast.from_pretrained(path)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.eval()
    return model, tokenizer, {**info, "cache_hit": cache_hit, "path": str(path),
                              "weights_sha256": weights_digest(path)}
