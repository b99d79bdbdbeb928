"""Sampling for accuracy measurements: the warm start's and the held-out evals.

Left-padded prompts, pure ancestral sampling at `temperature` (no top-k, no top-p), or
greedy decoding, through the decode loop of `src/models/decoding.py` (rows leave the batch
at their EOS). Greedy responses are those of HF `generate` (tested); sampled ones have
`generate`'s distribution but not its exact draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from src.models.decoding import decode


@dataclass(frozen=True)
class Generation:
    prompt_index: int  # which prompt of the call
    sample_index: int  # which of its num_samples
    token_ids: list[int]  # response tokens, up to and including the first EOS
    text: str  # decoded response without special tokens
    finished: bool  # True iff the response ended with EOS (not cut by max_new_tokens)


@torch.no_grad()
def generate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    *,
    num_samples: int = 1,
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    greedy: bool = False,
    seed: int = 0,
    batch_size: int = 256,
    progress: str | None = None,
) -> list[Generation]:
    """Sample `num_samples` responses per prompt; output is prompt-major.

    Seeded through its own generator, so the caller's global torch RNG state is left
    untouched and the same (model, prompts, seed, batch_size) gives the same responses.
    `progress`: the label of a progress bar over the responses (None: no bar).
    """
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    if not greedy and temperature <= 0:
        raise ValueError(f"temperature must be > 0 for sampling, got {temperature}")
    eos_id = tokenizer.eos_token_id
    flat = [(i, j) for i in range(len(prompts)) for j in range(num_samples)]
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    out: list[Generation] = []
    old_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    bar = tqdm(total=len(flat), desc=progress, unit="resp", disable=progress is None,
               leave=False, dynamic_ncols=True)
    try:
        for start in range(0, len(flat), batch_size):
            chunk = flat[start : start + batch_size]
            enc = tokenizer([prompts[i] for i, _ in chunk], return_tensors="pt", padding=True)
            decoded = decode(model, enc["input_ids"].to(device), enc["attention_mask"].to(device),
                             max_new_tokens=max_new_tokens, eos_token_id=eos_id,
                             pad_token_id=tokenizer.pad_token_id, temperature=temperature,
                             greedy=greedy, generator=generator)
            for (i, j), ids, n in zip(chunk, decoded.tokens.tolist(), decoded.lengths.tolist(),
                                      strict=True):
                ids = ids[:n]
                finished = ids[-1] == eos_id
                text = tokenizer.decode(ids, skip_special_tokens=True)
                out.append(Generation(i, j, ids, text, finished))
            bar.update(len(chunk))
    finally:
        bar.close()
        tokenizer.padding_side = old_side
        model.train(was_training)
    return out
