"""The warm start's SFT: AdamW on `prompt + worked solution + <eos>`, loss on the solution and
EOS only, in problem order, with packed batches (src/warm_start/build.py runs it)."""

from __future__ import annotations

import hashlib
import math
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from src.models.precision import autocast as autocast_context
from src.tasks.base import Problem, Task


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


def step_batch(tokenizer: PreTrainedTokenizerFast, task: Task, cfg: dict[str, Any],
               step: int) -> dict[str, torch.Tensor]:
    """SFT step `step`'s batch: problems step*B .. step*B+B-1, in index order."""
    bsz = int(cfg["batch_size"])
    return sft_batch(tokenizer, [task.problem(step * bsz + j) for j in range(bsz)],
                     pack_len=int(cfg["pack_len"]) or None)


def data_digest(tokenizer: PreTrainedTokenizerFast, task: Task, cfg: dict[str, Any]) -> str:
    """The first 16 hex digits of the sha256 of every SFT step's batch (each tensor's name,
    shape and int64 values, step by step): what the whole SFT reads, without training. A
    rebuild of a prefix checks its data to the last step with it."""
    h = hashlib.sha256()
    for step in range(int(cfg["steps"])):
        for name, tensor in sorted(step_batch(tokenizer, task, cfg, step).items()):
            h.update(f"{step}:{name}:{tuple(tensor.shape)}".encode())
            h.update(tensor.to(torch.int64).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def sft(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerFast,
    task: Task,
    cfg: dict[str, Any],
    *,
    seed: int,
    progress: bool = True,
    autocast: str | None = None,
    stop_after: int | None = None,
) -> list[float]:
    """AdamW on training problems in index order (batch `b` = problems b*B .. b*B+B-1).

    Returns the per-step losses (token mean over solution + EOS tokens).

    `stop_after=K` runs the first K steps of the same schedule (warmup and cosine over all of
    `cfg["steps"]`) and stops: the model is then step K's of the full SFT, bit for bit,
    which is what a prefix rebuild compares (experiments/warm_starts/rebuild.py --steps).

    `autocast` (None or "bfloat16") runs each step's forward and loss, and only those, in
    its own autocast context, as torch asks. One context around the whole loop is wrong:
    autocast caches the bf16 cast of every fp32 weight that requires grad until the
    outermost context exits, so every later forward would reuse step 0's casts and only the
    uncast weights (embeddings, norms) would learn. That was the GPU check's plateau at a
    loss of 2.02 (docs/gpu.md).
    """
    steps = int(cfg["steps"])
    if stop_after is not None and not 1 <= stop_after <= steps:
        raise ValueError(f"stop_after={stop_after}: give 1 to sft.steps ({steps}) steps")
    opt, sched = _optimizer(model, cfg, steps)
    max_pos = model.config.max_position_embeddings
    model.train()
    losses: list[float] = []
    torch.manual_seed(seed)
    run_steps = steps if stop_after is None else stop_after
    bar = tqdm(range(run_steps), desc="warm start SFT", disable=not progress,
               dynamic_ncols=True)
    for step in bar:
        batch = step_batch(tokenizer, task, cfg, step)
        _check_fits(batch, max_pos)
        device = next(model.parameters()).device
        with autocast_context(device, autocast):
            loss = _sft_loss(model, {k: v.to(device) for k, v in batch.items()},
                             float(cfg["label_smoothing"]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), float(cfg["grad_clip"]))
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if step % 10 == 0 or step == run_steps - 1:
            bar.set_postfix(loss=f"{losses[-1]:.3f}", lr=f"{sched.get_last_lr()[0]:.1e}")
    model.eval()
    return losses


def _optimizer(model: PreTrainedModel, cfg: dict[str, Any], steps: int):
    """AdamW (no weight decay on vectors) and its warmup-then-cosine schedule."""
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
    return opt, sched


def _check_fits(batch: dict[str, torch.Tensor], max_pos: int) -> None:
    """An SFT sequence longer than the model's positions is an error naming both."""
    if "position_ids" in batch:
        longest = int(batch["position_ids"].max()) + 1
    else:
        longest = int(batch["attention_mask"].sum(1).max())
    if longest > max_pos:
        raise ValueError(
            f"an SFT sequence has {longest} tokens but model.max_position_embeddings "
            f"is {max_pos}; raise it or shorten the task"
        )


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

