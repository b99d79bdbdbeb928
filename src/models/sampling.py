"""Plain HF-`generate` sampling, used by the warm start to measure accuracy.

The trainer's rollout backend is separate; this is the minimal reference: left-padded
prompts, pure ancestral sampling at `temperature` (top-k and top-p switched off, since HF's
default generation config would otherwise apply top_k=50), or greedy decoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase


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
) -> list[Generation]:
    """Sample `num_samples` responses per prompt; output is prompt-major.

    Seeded through a forked RNG, so the caller's global torch RNG state is left untouched
    and the same (model, prompts, seed, batch_size) gives the same responses.
    """
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    if not greedy and temperature <= 0:
        raise ValueError(f"temperature must be > 0 for sampling, got {temperature}")
    eos_id = tokenizer.eos_token_id
    # top_k must be 0, not None: generate() fills None from its global defaults (top_k=50).
    # Greedy decoding takes no sampling flags (setting them only triggers a warning).
    sampling = {} if greedy else {"temperature": temperature, "top_k": 0, "top_p": 1.0}
    gen_cfg = GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=not greedy,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos_id,
        **sampling,
    )
    flat = [(i, j) for i in range(len(prompts)) for j in range(num_samples)]
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out: list[Generation] = []
    old_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for start in range(0, len(flat), batch_size):
                chunk = flat[start : start + batch_size]
                enc = tokenizer(
                    [prompts[i] for i, _ in chunk], return_tensors="pt", padding=True
                ).to(device)
                seqs = model.generate(**enc, generation_config=gen_cfg)
                responses = seqs[:, enc["input_ids"].shape[1] :].tolist()
                for (i, j), ids in zip(chunk, responses, strict=True):
                    finished = eos_id in ids
                    if finished:
                        ids = ids[: ids.index(eos_id) + 1]
                    text = tokenizer.decode(ids, skip_special_tokens=True)
                    out.append(Generation(i, j, ids, text, finished))
    finally:
        tokenizer.padding_side = old_side
        model.train(was_training)
    return out
