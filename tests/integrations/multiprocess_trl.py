"""Two-process CPU check of the TRL plug (not collected by pytest; about a minute).

    torchrun --nproc_per_node 2 tests/integrations/multiprocess_trl.py /tmp/mp_runs

Runs bapo and top_entropy at 2x on gloo. Rank 0 checks that:
- the run dir is complete and the updates combine both ranks' micro-batches;
- both ranks used the same BAPO bounds and the same top-q entropy threshold in every
  micro-batch (the search ran on the gathered data of both ranks);
- token rows cover both ranks' responses (gathered to rank 0, which alone writes).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pyarrow.parquet as pq

from src.pinning import pin_process

if __name__ == "__main__":
    pin_process()  # as the project's import did before; before torch loads

import torch  # noqa: E402
from accelerate import PartialState  # noqa: E402
from accelerate.utils import gather_object  # noqa: E402
from datasets import Dataset  # noqa: E402
from trl import GRPOConfig  # noqa: E402

from src.integrations.trl_grpo import ProjectGRPOTrainer, trl_knobs  # noqa: E402
from src.models.tiny import build_tiny_model  # noqa: E402
from src.models.tokenizer import train_tokenizer  # noqa: E402


def digit_reward(completions, **_):
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]


def main(out: Path, global_stats: bool = True) -> None:
    warnings.simplefilter("ignore")
    state = PartialState()
    tok = train_tokenizer([f"{a}+{b}={a + b}" for a in range(30) for b in range(30)], 300)
    ds = Dataset.from_list([{"prompt": f"{a}+{a + 1}="} for a in range(64)])
    for method in ("bapo", "top_entropy"):
        torch.manual_seed(0)
        model = build_tiny_model(tok, hidden_size=64, num_layers=2, num_heads=2,
                                 max_position_embeddings=64)
        run_dir = out / "runs" / "mp_2x" / method / "seed0"
        args = GRPOConfig(output_dir=str(out / "trl" / method), per_device_train_batch_size=4,
                          num_generations=4, max_completion_length=6, max_steps=4,
                          learning_rate=1e-3, report_to="none", save_strategy="no",
                          use_cpu=True, seed=0, disable_tqdm=True, **trl_knobs(2))
        trainer = ProjectGRPOTrainer(model=model, reward_funcs=digit_reward, args=args,
                                     train_dataset=ds, processing_class=tok, method=method,
                                     run_dir=run_dir, experiment="mp_2x",
                                     global_stats=global_stats)
        seen = []  # (c_low, c_high, min kept entropy, max dropped entropy) per micro-batch
        objective = trainer._objective

        def spy(logps, old, adv, mask, entropy, _objective=objective, _seen=seen):
            out, record = _objective(logps, old, adv, mask, entropy)
            if out is not None:
                ent = entropy.detach()
                kept, dropped = ent[out.in_loss], ent[mask & ~out.in_loss]
                _seen.append((out.c_low, out.c_high,
                              float(kept.min()) if kept.numel() else float("inf"),
                              float(dropped.max()) if dropped.numel() else float("-inf")))
            return out, record

        trainer._objective = spy
        trainer.train()
        everyone = gather_object([seen])
        state.wait_for_everyone()
        if not state.is_main_process:
            continue
        status = json.loads((run_dir / "status.json").read_text())["status"]
        recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        ups = [r for r in recs if r["kind"] == "update"]
        tokens = pq.read_table(run_dir / "tokens").to_pandas()
        per_update_bounds = tokens.groupby(["step", "update"])[["c_low", "c_high"]].nunique()
        rollout = args.generation_batch_size  # 4 per rank x 2 ranks x 2 steps = 16
        print(f"[{method}] status={status} updates={len(ups)} micro_batches/update="
              f"{[u['micro_batches'] for u in ups]} tokens_total/update="
              f"{[u['tokens_total'] for u in ups]} c_low={[u['c_low'] for u in ups]} "
              f"c_high={[u['c_high'] for u in ups]} response_ids={sorted(set(tokens['response_id']))} "
              f"(rollout of {rollout})", flush=True)
        assert status == "finished" and len(ups) == 4
        assert all(u["micro_batches"] == 2 for u in ups)  # one per rank, combined
        assert (per_update_bounds == 1).all().all()
        assert set(tokens["response_id"]) == set(range(rollout))  # both ranks' halves
        rank0, rank1 = everyone
        assert [b[:2] for b in rank0] == [b[:2] for b in rank1]  # same bounds, every micro-batch
        if method == "top_entropy":
            # One threshold over both ranks: no token dropped on either rank has a higher
            # entropy than a token kept on either rank.
            for a, b in zip(rank0, rank1, strict=True):
                assert max(a[3], b[3]) <= min(a[2], b[2]), (a, b)
        print(f"[{method}] ranks agree on bounds/threshold in all {len(rank0)} micro-batches",
              flush=True)
    state.wait_for_everyone()


if __name__ == "__main__":
    # `--per-rank`: the negative control (per-rank search); the agreement checks must fail.
    main(Path(sys.argv[1]), global_stats="--per-rank" not in sys.argv)
