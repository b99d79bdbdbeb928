"""Is torch.compile a cost lever for the pretrained testbed? (pretrained.md)

    python experiments/calibration/pretrained_compile.py [--reps 3] [OVERRIDE ...]

Times one update's forward and backward on a mini-batch of the testbed's shape (8 responses
of 45 prompt + 30 response tokens, random ids: the cost does not depend on which tokens),
eagerly and under `torch.compile(dynamic=True)` (every mini-batch has another padded
length, so a static compile would recompile per length), and the compile itself. Prints
seconds: compile (the first compiled call), eager and compiled per call, their ratio.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1])]

from src.pinning import pin_process  # noqa: E402

pin_process()  # the numerics mode, before torch loads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=45)
    parser.add_argument("--response", type=int, default=30)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()

    import torch

    from src.build import build_parts, compose_config

    cfg = compose_config(["experiment=smol_4x", *args.overrides])
    parts = build_parts(cfg, progress=False)
    model = parts.model
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (args.rows, args.prompt + args.response),
                        generator=g)
    mask = torch.ones_like(ids)

    def step(fn) -> float:
        t0 = time.perf_counter()
        logits = fn(input_ids=ids, attention_mask=mask, logits_to_keep=args.response + 1).logits
        logits.float().logsumexp(-1).mean().backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    step(model)  # warm-up
    eager = min(step(model) for _ in range(args.reps))
    compiled = torch.compile(model, dynamic=True)
    first = step(compiled)
    fast = min(step(compiled) for _ in range(args.reps))
    print(json.dumps({"overrides": args.overrides, "threads": cfg.train.threads,
                      "shape": [args.rows, args.prompt + args.response],
                      "compile_first_call_s": round(first, 1), "eager_s": round(eager, 2),
                      "compiled_s": round(fast, 2), "compiled_over_eager": round(fast / eager, 3)}))


if __name__ == "__main__":
    main()
