"""Seconds per iteration of the default warm start's SFT, in this process: the clock both
bench_numerics.py (native against portable kernels) and bench_wait_policy.py (libgomp's wait
settings) read, each in a fresh child process that its setting was made for."""

from __future__ import annotations

import time


def seconds_per_sft_iteration(steps: int, threads: int) -> float:
    """`steps` SFT iterations of the default model and batch on `threads` threads, timed
    after one untimed iteration (first-call allocations); seconds per iteration."""
    import torch

    from src.models.tiny import build_tiny_model
    from src.models.tokenizer import train_tokenizer
    from src.tasks import get_task
    from src.warm_start import resolve_configs
    from src.warm_start.sft import sft

    torch.set_num_threads(threads)
    m, s = resolve_configs({"tokenizer_corpus": 2000}, {"steps": 1})
    task = get_task("arithmetic")
    tok = train_tokenizer(task.corpus(int(m["tokenizer_corpus"])), m["vocab_size"])
    model = build_tiny_model(tok, arch=m["arch"], hidden_size=m["hidden_size"],
                             num_layers=m["num_layers"], num_heads=m["num_heads"],
                             intermediate_size=m["intermediate_size"],
                             max_position_embeddings=m["max_position_embeddings"],
                             tie_word_embeddings=m["tie_word_embeddings"], seed=0)
    sft(model, tok, task, s, seed=0, progress=False)  # untimed: first-call allocations
    t0 = time.perf_counter()
    sft(model, tok, task, {**s, "steps": steps}, seed=0, progress=False)
    return (time.perf_counter() - t0) / steps
