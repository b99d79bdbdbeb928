"""Warm start for tiny models: tokenizer + random init + SFT on worked solutions, cached.

RL from a random tiny model earns zero reward, so every CPU run starts from a model that
was fine-tuned on `prompt + worked solution + <eos>` (loss on the solution and EOS only).
The defaults are tuned so that on a 2-core CPU the SFT takes about two minutes and the
held-out accuracy lands where RL groups of 8 samples mix right and wrong answers.

The SFT runs on the run's device (`device`), optionally under bf16 autocast (`autocast`,
see `src/models/precision.py`); a GPU check warm-starts a 25-100M model that way in about
a minute (an estimate: benchmarks/gpu_estimate.py) instead of hours on CPU.

The result is cached under `cache_dir/<key>/` where `key` hashes (task config, model config,
SFT config, seed, WARM_START_VERSION, and the device type, autocast dtype and numerics mode
when they are not the CPU / fp32 / portable default, since those change the weights) after
defaults are filled in. The SFT always runs on `BUILD_THREADS` CPU threads, whatever the
run's own count, because threads split its reductions and so change the weights.

Builds that committed results start from are shipped in the repository
(`experiments/warm_starts/<key>/`, `SHIPPED_DIR`): a run whose key has a shipped build loads
it and never builds, so every machine starts from the same weights, even one whose CPU
would round the SFT otherwise. `experiments/warm_starts/rebuild.py` rebuilds them from
scratch and compares the digests.
The directory holds the model and tokenizer (`save_pretrained`, so `load_hf_model(path)`
also opens it) and `info.json`. It is written to a temporary directory and renamed into
place, so a crash never leaves a half-written cache entry and concurrent writers cannot
corrupt one.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import shutil
import statistics
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
import transformers
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerFast

from src.models.precision import autocast as autocast_context
from src.models.sampling import generate
from src.models.tiny import build_tiny_model, num_parameters
from src.models.tokenizer import train_tokenizer
from src.tasks.base import Problem, Task

# Bump when the SFT recipe changes in a way that changes the weights for the same config.
# 2: packed SFT batches.
WARM_START_VERSION = 2
# The SFT's CPU threads, fixed: the shipped builds were made with 2 (a build with another
# count rounds its reductions otherwise and gives other weights).
BUILD_THREADS = 2
SHIPPED_DIR = Path(__file__).resolve().parents[2] / "experiments" / "warm_starts"

DEFAULT_MODEL_CFG: dict[str, Any] = {
    "arch": "llama",
    "hidden_size": 256,
    "num_layers": 4,
    "num_heads": 4,
    "intermediate_size": None,  # None: 8/3 * hidden_size, rounded up to a multiple of 16
    "max_position_embeddings": 128,
    "tie_word_embeddings": True,
    "vocab_size": 320,  # tokenizer budget; arithmetic text uses about 266
    "tokenizer_corpus": 20_000,  # training problems used to train the tokenizer
}

DEFAULT_SFT_CFG: dict[str, Any] = {
    "steps": 350,  # ~100 s on 2 idle cores; ~35% sampled accuracy on the default mix
    "batch_size": 32,
    "lr": 1e-3,  # 3e-3 never learned to copy the terms within the budget
    "min_lr_ratio": 0.1,  # cosine decay to lr * min_lr_ratio
    "warmup_steps": 35,
    "weight_decay": 0.01,
    "grad_clip": 1.0,
    "pack_len": 128,  # pack problems into rows of this many tokens; 0 = one padded row each
    "eval_problems": 256,  # held-out problems for the accuracy measurement
    "eval_samples": 4,  # sampled responses per held-out problem
    "eval_temperature": 1.0,
    "max_new_tokens": 64,
    # > 0: a warm start with more entropy (the SFT target mixes in a uniform distribution);
    # 0 leaves the cache key as before it existed (`cache_key`), so shipped builds still load
    "label_smoothing": 0.0,
}


def resolve_configs(
    model_cfg: dict[str, Any] | None, sft_cfg: dict[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Fill in defaults; unknown keys are config errors named by their key."""
    out = []
    for prefix, given, default in (
        ("model", model_cfg or {}, DEFAULT_MODEL_CFG),
        ("sft", sft_cfg or {}, DEFAULT_SFT_CFG),
    ):
        unknown = sorted(set(given) - set(default))
        if unknown:
            raise ValueError(
                f"unknown key(s) {', '.join(f'{prefix}.{k}' for k in unknown)}; "
                f"valid keys: {sorted(default)}"
            )
        out.append({**default, **dict(given)})
    m, s = out
    for key in ("steps", "batch_size", "eval_problems", "eval_samples", "max_new_tokens"):
        if int(s[key]) < 1:
            raise ValueError(f"sft.{key} must be >= 1, got {s[key]}")
    if not float(s["lr"]) > 0:
        raise ValueError(f"sft.lr must be > 0, got {s['lr']}")
    if not 0.0 <= float(s["label_smoothing"]) < 1.0:
        raise ValueError(f"sft.label_smoothing must be in [0, 1), got {s['label_smoothing']}")
    return m, s


def _runtime(device: torch.device | str, autocast_name: str | None,
             numerics: str = "portable") -> dict[str, str]:
    """What besides the configs changes the SFT's numbers; empty for the CPU fp32 portable
    default, so the default's cache keys are those of earlier versions (and of the shipped
    builds). A native build's key names its mode: its weights depend on the CPU."""
    runtime = {}
    if torch.device(device).type != "cpu":
        runtime["device"] = torch.device(device).type
    if autocast_name is not None:
        runtime["autocast"] = autocast_name
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
    """Return (model, tokenizer, info): the shipped build of this key when there is one, else
    from the cache when present, else trained and cached.

    `info["cache_hit"]` says whether nothing was built; `info["path"]` is the entry loaded.
    The model is fp32 in eval mode, on `device` when it was trained here and on CPU when it
    was loaded. SFT (on `device`, under `autocast` when given, on `BUILD_THREADS` threads)
    uses training problems `0 .. steps*batch_size - 1` (`info["next_train_index"]` is the
    first unused one). `numerics` is the mode torch loaded in (src/_numerics.py).
    """
    m_cfg, s_cfg = resolve_configs(model_cfg, sft_cfg)
    key = cache_key(task, m_cfg, s_cfg, seed, device=device, autocast=autocast, numerics=numerics)
    if shipped_dir is not None and (Path(shipped_dir) / key / "info.json").is_file():
        return _load(Path(shipped_dir) / key, cache_hit=True)
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
          progress: bool, device: torch.device | str, autocast: str | None,
          numerics: str) -> tuple[PreTrainedModel, PreTrainedTokenizerFast, dict[str, Any]]:
    """Train the warm start of resolved configs into the entry `final` (written atomically)."""
    from src._numerics import fingerprint

    key = final.name
    print(build_notice(final, m_cfg, s_cfg), flush=True)
    tokenizer = train_tokenizer(task.corpus(int(m_cfg["tokenizer_corpus"])), m_cfg["vocab_size"])
    model = build_tiny_model(
        tokenizer,
        arch=m_cfg["arch"],
        hidden_size=m_cfg["hidden_size"],
        num_layers=m_cfg["num_layers"],
        num_heads=m_cfg["num_heads"],
        intermediate_size=m_cfg["intermediate_size"],
        max_position_embeddings=m_cfg["max_position_embeddings"],
        tie_word_embeddings=m_cfg["tie_word_embeddings"],
        seed=seed,
    ).to(device)
    run_threads = torch.get_num_threads()
    torch.set_num_threads(BUILD_THREADS)  # the eval too, so that info.json is the same
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        with autocast_context(device, autocast):
            losses = sft(model, tokenizer, task, s_cfg, seed=seed, progress=progress)
        _synchronize(device)
        sft_seconds, sft_cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
        build_fingerprint = fingerprint(threads=BUILD_THREADS)
        t0 = time.perf_counter()
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
    tail = losses[-max(1, len(losses) // 10) :]
    info: dict[str, Any] = {
        "key": key,
        "version": WARM_START_VERSION,
        "task": dict(task.config),
        "model": m_cfg,
        "sft": s_cfg,
        "seed": int(seed),
        "runtime": _runtime(device, autocast, numerics),
        "numerics": build_fingerprint,
        "num_parameters": num_parameters(model),
        "vocab_size": len(tokenizer),
        "sft_loss_first": losses[0],
        "sft_loss_final": sum(tail) / len(tail),  # mean over the last 10% of steps
        "sft_losses": losses,
        "sft_seconds": sft_seconds,
        # CPU time summed over threads. Wall time on a shared machine depends on the other
        # jobs; with one thread this is a load-independent measure of the work (with more,
        # threads spin while waiting for each other and inflate it under contention).
        "sft_cpu_seconds": sft_cpu_seconds,
        "eval_seconds": time.perf_counter() - t0,
        "next_train_index": int(s_cfg["steps"]) * int(s_cfg["batch_size"]),
        **metrics,
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


# --- SFT --------------------------------------------------------------------------------


def sft_batch(
    tokenizer: PreTrainedTokenizerFast, problems: list[Problem], *, pack_len: int | None = None
) -> dict[str, torch.Tensor]:
    """`<bos> prompt solution <eos>` per problem; labels are -100 except solution + EOS.

    Prompt and solution are tokenized separately, exactly as the rollout tokenizes the
    prompt alone and the policy continues it, so SFT and RL see the same token boundary.

    `pack_len=None`: one right-padded row per problem (`input_ids, attention_mask, labels`).
    `pack_len=L`: problems are packed in order into rows of width max(L, longest), with
    `position_ids` restarting at 0 for each problem and no `attention_mask`; HF then builds a
    block-diagonal causal mask (call the model with `use_cache=False`), so every problem sees
    only itself and the loss equals the padded one, for about 25% less compute than padding.
    """
    prompts = tokenizer([p.prompt for p in problems], add_special_tokens=True)["input_ids"]
    sols = tokenizer([p.solution for p in problems], add_special_tokens=False)["input_ids"]
    seqs, labels = [], []
    for p_ids, s_ids in zip(prompts, sols, strict=True):
        target = s_ids + [tokenizer.eos_token_id]
        seqs.append(p_ids + target)
        labels.append([-100] * len(p_ids) + target)
    pad = tokenizer.pad_token_id
    if pack_len is None:
        rows = [[i] for i in range(len(seqs))]
        width = max(map(len, seqs))
    else:
        width = max(pack_len, *map(len, seqs))
        rows, used = [], []  # first fit, in problem order: deterministic
        for i, s in enumerate(seqs):
            r = next((r for r, u in enumerate(used) if u + len(s) <= width), len(rows))
            if r == len(rows):
                rows.append([])
                used.append(0)
            rows[r].append(i)
            used[r] += len(s)
    input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
    label_t = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    position_ids = torch.zeros((len(rows), width), dtype=torch.long)
    for r, members in enumerate(rows):
        o = 0
        for i in members:
            n = len(seqs[i])
            input_ids[r, o : o + n] = torch.tensor(seqs[i])
            label_t[r, o : o + n] = torch.tensor(labels[i])
            mask[r, o : o + n] = 1
            position_ids[r, o : o + n] = torch.arange(n)
            o += n
        # the padding tail keeps position 0: each pad token is a block of its own
    if pack_len is None:
        return {"input_ids": input_ids, "attention_mask": mask, "labels": label_t}
    return {"input_ids": input_ids, "position_ids": position_ids, "labels": label_t}


def _lr_factor(step: int, warmup: int, total: int, min_ratio: float) -> float:
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def sft(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerFast,
    task: Task,
    cfg: dict[str, Any],
    *,
    seed: int,
    progress: bool = True,
) -> list[float]:
    """AdamW on training problems in index order (batch `b` = problems b*B .. b*B+B-1).

    Returns the per-step losses (token mean over solution + EOS tokens).
    """
    steps, bsz = int(cfg["steps"]), int(cfg["batch_size"])
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": float(cfg["weight_decay"])},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=float(cfg["lr"]),
        betas=(0.9, 0.95),
    )
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: _lr_factor(s, int(cfg["warmup_steps"]), steps, float(cfg["min_lr_ratio"])),
    )
    max_pos = model.config.max_position_embeddings
    model.train()
    losses: list[float] = []
    torch.manual_seed(seed)
    bar = tqdm(range(steps), desc="warm start SFT", disable=not progress, dynamic_ncols=True)
    for step in bar:
        batch = sft_batch(
            tokenizer,
            [task.problem(step * bsz + j) for j in range(bsz)],
            pack_len=int(cfg["pack_len"]) or None,
        )
        if "position_ids" in batch:
            longest = int(batch["position_ids"].max()) + 1
        else:
            longest = int(batch["attention_mask"].sum(1).max())
        if longest > max_pos:
            raise ValueError(
                f"an SFT sequence has {longest} tokens but model.max_position_embeddings "
                f"is {max_pos}; raise it or shorten the task"
            )
        device = next(model.parameters()).device
        loss = _sft_loss(model, {k: v.to(device) for k, v in batch.items()},
                         float(cfg["label_smoothing"]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), float(cfg["grad_clip"]))
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if step % 10 == 0 or step == steps - 1:
            bar.set_postfix(loss=f"{losses[-1]:.3f}", lr=f"{sched.get_last_lr()[0]:.1e}")
    model.eval()
    return losses


def _sft_loss(model: PreTrainedModel, batch: dict, label_smoothing: float) -> torch.Tensor:
    """The token-mean cross-entropy of the solution tokens: HF's own loss, or with label
    smoothing the same shift and mean with `label_smoothing` (torch's cross_entropy)."""
    if label_smoothing == 0.0:
        return model(**batch, use_cache=False).loss
    labels = batch["labels"]
    logits = model(**{k: v for k, v in batch.items() if k != "labels"}, use_cache=False).logits
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100,
        label_smoothing=label_smoothing)


# --- evaluation -------------------------------------------------------------------------


def evaluate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerFast,
    task: Task,
    problems: list[Problem],
    *,
    num_samples: int,
    temperature: float,
    max_new_tokens: int,
    seed: int,
    progress: bool = False,
) -> dict[str, Any]:
    """Greedy and sampled accuracy on `problems`, overall and by difficulty, plus the
    token-length distribution of sampled responses and of the reference solutions."""
    prompts = [p.prompt for p in problems]
    greedy = generate(
        model, tokenizer, prompts, num_samples=1, max_new_tokens=max_new_tokens, greedy=True,
        progress="warm start eval, greedy" if progress else None,
    )
    sampled = generate(
        model,
        tokenizer,
        prompts,
        num_samples=num_samples,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        seed=seed,
        progress="warm start eval, sampled" if progress else None,
    )
    ref_ids = tokenizer([p.solution for p in problems], add_special_tokens=False)["input_ids"]
    ref_lens = [len(ids) + 1 for ids in ref_ids]  # + EOS
    by_diff: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for g in greedy:
        p = problems[g.prompt_index]
        by_diff[p.difficulty]["greedy"].append(task.score(p, g.text))
    for g in sampled:
        p = problems[g.prompt_index]
        by_diff[p.difficulty]["sampled"].append(task.score(p, g.text))
        by_diff[p.difficulty]["sampled_len"].append(len(g.token_ids))
        by_diff[p.difficulty]["finished"].append(float(g.finished))
    for p, n in zip(problems, ref_lens, strict=True):
        by_diff[p.difficulty]["ref_len"].append(n)

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else float("nan")

    def dist(xs: list[float]) -> dict[str, float]:
        return {"min": min(xs), "median": statistics.median(xs), "max": max(xs)}

    all_sampled = [task.score(problems[g.prompt_index], g.text) for g in sampled]
    return {
        "greedy_accuracy": mean([task.score(problems[g.prompt_index], g.text) for g in greedy]),
        "sampled_accuracy": mean(all_sampled),
        "eval_temperature": temperature,
        "finished_fraction": mean([float(g.finished) for g in sampled]),
        "response_length": dist([len(g.token_ids) for g in sampled]),
        "by_difficulty": {
            str(d): {
                "n_problems": len(v["greedy"]),
                "greedy_accuracy": mean(v["greedy"]),
                "sampled_accuracy": mean(v["sampled"]),
                "finished_fraction": mean(v["finished"]),
                "sampled_length": dist(v["sampled_len"]),
                "reference_length": dist(v["ref_len"]),
            }
            for d, v in sorted(by_diff.items())
        },
    }


# --- cache ------------------------------------------------------------------------------


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
