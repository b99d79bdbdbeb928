"""How much of the pretrained testbed's scoring forwards is padding or a repeated prompt, and
how much `train.pack` and `train.shared_prefix` leave: counted in token positions, not timed.

The response lengths are the committed smol_4x runs' (experiments/smol_grid/smol_4x/*, every
method and seed: the token files' `response_length` of each step's logged responses); the
prompt lengths are the smol_4x task's chat prompts under SmolLM2's tokenizer. A rollout is
8 prompts x 4 responses, each response's length drawn from its run's logged lengths of that
step; it is split into mini-batches as `train.minibatch_split=responses` splits it (a seeded
shuffle) or as `groups` splits it (whole groups), of 8 rows (smol_4x) or 32 (one update
per rollout, smol_1x). For each forward:

  plain   rows x (longest prompt + longest response)
  pack    the rows in length buckets (src/packing.py), each bucket its own widths
  shared  the distinct prompts once (rows x longest prompt for them), the responses as plain
  both    shared, with the responses in length buckets

Run: python benchmarks/padding_share.py [--rollouts 400] [--pack 0.1]
"""

from __future__ import annotations

import argparse
import random
from collections import defaultdict

from _setup import REPO  # this checkout first on sys.path

from src.packing import length_buckets


def step_lengths() -> list[list[int]]:
    """Per (run, step): the logged responses' lengths."""
    import pandas as pd

    pools = []
    for tokens in sorted((REPO / "experiments/smol_grid/smol_4x").glob("*/*/seed*/tokens/*.parquet")):
        frame = pd.read_parquet(tokens, columns=["step", "response_id", "response_length"])
        per = frame.drop_duplicates(["step", "response_id"]).groupby("step")["response_length"]
        pools += [list(map(int, v)) for _, v in per]
    return pools


def prompt_lengths() -> list[int]:
    """Token counts of the smol_4x training prompts in chat form (SmolLM2's tokenizer)."""
    from src.build import build_task, prompt_formatter
    from src.models.hf import load_hf_model
    from src.models.packaged import resolve_model_path
    from tests.conftest import compose

    cfg = compose(["experiment=smol_4x"])
    task = build_task(cfg.task)
    _, tok = load_hf_model(resolve_model_path(cfg.model.path), gguf_file=cfg.model.gguf_file,
                           progress=False, gguf_cache_dir=REPO / ".cache" / "gguf")
    fmt = prompt_formatter(cfg.model, tok)
    return [len(tok(fmt(task.problem(i).prompt))["input_ids"]) for i in range(400)]


def positions(rows: list[tuple[int, int, int]], pack: float | None, shared: bool) -> tuple[int, int]:
    """(token positions computed, of which response padding) for one forward's rows
    (group, prompt length, response length)."""
    buckets = (length_buckets([r for _, _, r in rows], pack) if pack is not None
               else [list(range(len(rows)))])
    total = padding = 0
    if shared:
        prompts = {g: p for g, p, _ in rows}
        total += len(prompts) * max(prompts.values())
    for bucket in buckets:
        t = max(rows[i][2] for i in bucket)
        p = 0 if shared else max(rows[i][1] for i in bucket)
        total += len(bucket) * (p + t)
        padding += sum(t - rows[i][2] for i in bucket)
    return total, padding


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=400)
    parser.add_argument("--pack", type=float, default=0.1)
    args = parser.parse_args()
    rng = random.Random(0)
    pools, prompts = step_lengths(), prompt_lengths()
    lengths = [n for pool in pools for n in pool]
    print(f"response lengths: {len(lengths)} logged, mean {sum(lengths) / len(lengths):.1f}, "
          f"range {min(lengths)}-{max(lengths)}; prompt lengths: mean "
          f"{sum(prompts) / len(prompts):.1f}, range {min(prompts)}-{max(prompts)}")
    layouts = {"plain": (None, False), "pack": (args.pack, False), "shared": (None, True),
               "both": (args.pack, True)}
    for rows_per_forward, split in ((8, "responses"), (8, "groups"), (32, "responses")):
        stats = defaultdict(lambda: [0, 0, 0, 0])  # positions, response padding, response slots, forwards
        for _ in range(args.rollouts):
            pool = rng.choice(pools)
            rollout = [(g, p, rng.choice(pool)) for g in range(8) for p in [rng.choice(prompts)]
                       for _ in range(4)]
            if split == "responses":
                rollout = rng.sample(rollout, len(rollout))
            else:  # whole groups, in a shuffled order
                order = rng.sample(range(8), 8)
                rollout = [row for g in order for row in rollout if row[0] == g]
            for start in range(0, 32, rows_per_forward):
                rows = rollout[start:start + rows_per_forward]
                for name, (pack, shared) in layouts.items():
                    total, pad = positions(rows, pack, shared)
                    s = stats[name]
                    s[0] += total
                    s[1] += pad
                    s[2] += pad + sum(r for _, _, r in rows)
                    s[3] += len(length_buckets([r for _, _, r in rows], pack)) if pack else 1
        base = stats["plain"][0]
        print(f"\nforwards of {rows_per_forward} rows, minibatch_split={split} "
              f"({args.rollouts} rollouts):")
        print(f"{'layout':8} {'positions':>10} {'vs plain':>9} {'response padding':>17} "
              f"{'forwards/batch':>15}")
        for name, (total, pad, slots, forwards) in stats.items():
            batches = args.rollouts * 32 // rows_per_forward
            print(f"{name:8} {total:10d} {total / base:9.3f} {pad / slots:17.1%} "
                  f"{forwards / batches:15.2f}")


if __name__ == "__main__":
    main()
