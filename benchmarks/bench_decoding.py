"""The rollout's decode loop against HF `generate` on the same prompts, alternating.

    python benchmarks/bench_decoding.py [--rounds 5] [--prompts 16] [--samples 8] [--threads 2]

The cached warm start of the default config, one rollout's worth of training prompts
(`--prompts` x `--samples` rows, 64 new tokens, temperature 1). Three samplers, timed in
turn in each round: `generate` with `output_scores` (what the rollout used before
src/models/decoding.py), plain `generate`, and `decode` (rows leave the batch at EOS, log-probs
from the logits in hand). Prints the median seconds per call and the speed-up of `decode`.
"""

from __future__ import annotations

import argparse
import statistics
import time

from _setup import REPO  # this checkout first on sys.path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()

    import torch
    from transformers import GenerationConfig

    from src.build import build_model, build_task, compose_config
    from src.models.decoding import decode

    torch.set_num_threads(a.threads)
    cfg = compose_config([f"cache_dir={REPO / '.cache'}"])
    task = build_task(cfg.task)
    model, tok, info = build_model(cfg.model, task, torch.device("cpu"), progress=False,
                                   cache_dir=cfg.cache_dir, numerics=cfg.numerics)
    model.eval()
    prompts = [task.problem(info["next_train_index"] + i).prompt for i in range(a.prompts)]
    tok.padding_side = "left"
    enc = tok(prompts, return_tensors="pt", padding=True)
    ids = enc["input_ids"].repeat_interleave(a.samples, 0)
    mask = enc["attention_mask"].repeat_interleave(a.samples, 0)
    common = dict(max_new_tokens=a.max_new_tokens, do_sample=True, temperature=1.0, top_k=0,
                  top_p=1.0, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                  bos_token_id=tok.bos_token_id)
    with_scores = GenerationConfig(**common, output_scores=True, return_dict_in_generate=True)
    plain = GenerationConfig(**common)

    def hf(config, seed):
        torch.manual_seed(seed)
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        return getattr(out, "sequences", out)[:, ids.shape[1]:]

    def ours(seed):
        return decode(model, ids, mask, max_new_tokens=a.max_new_tokens,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      generator=torch.Generator().manual_seed(seed)).tokens

    samplers = {"generate + output_scores": lambda s: hf(with_scores, s),
                "generate": lambda s: hf(plain, s), "decode": ours}
    times: dict[str, list[float]] = {k: [] for k in samplers}
    tokens: dict[str, list[float]] = {k: [] for k in samplers}
    with torch.no_grad():
        for r in range(a.rounds + 1):  # round 0 warms up
            for name, fn in samplers.items():
                t0 = time.perf_counter()
                out = fn(r)
                if r:
                    times[name].append(time.perf_counter() - t0)
                    ends = (out == tok.eos_token_id).int().argmax(1) + 1
                    ends[~(out == tok.eos_token_id).any(1)] = a.max_new_tokens
                    tokens[name].append(float(ends.float().mean()))
    print(f"{len(ids)} rows x {a.max_new_tokens} new tokens, {a.threads} threads, {a.rounds} rounds")
    print("| sampler | s per call (median) | mean response tokens |")
    print("|---|---|---|")
    for name in samplers:
        print(f"| {name} | {statistics.median(times[name]):.3f} | {statistics.mean(tokens[name]):.1f} |")
    base = statistics.median(times["generate + output_scores"])
    print(f"decode speed-up over generate + output_scores: {base / statistics.median(times['decode']):.2f}x")


if __name__ == "__main__":
    from src.pinning import pin_process

    pin_process()  # before torch loads, as `python -m src.run` does
    main()
