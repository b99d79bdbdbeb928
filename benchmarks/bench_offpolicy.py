"""What the off-policy sources cost per step, side by side in one process.

Four arms on the CPU default (staleness 4x, bapo): fresh (today's minibatch), delay K=4,
replay (C=4, R=1), partial (16 tokens a step). Each arm is its own trainer on its own copy
of the warm-started model; steps alternate between arms (round robin) so machine noise hits
all alike. Step 0 of every arm is a warm-up and is not timed (delay generates its K early
rollouts there). Reported per arm: median seconds per step and per update, the split into
rollout / behaviour pass / updates, forward passes per step (counted), and the stored data
in flight in bytes. The queue's size for the GPU config is computed from its shapes.

    python benchmarks/bench_offpolicy.py                 # 6 timed steps per arm
    python benchmarks/bench_offpolicy.py --steps 3 -- model.architecture.hidden_size=64
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
from pathlib import Path

import _setup  # noqa: F401 - this checkout first on sys.path

ARMS = {
    "fresh": [],
    "delay K=4": ["offpolicy.source=delay", "offpolicy.delay=4"],
    "replay C=4 R=1": ["offpolicy.source=replay", "offpolicy.replay_capacity=4",
                       "offpolicy.replay_draws=1"],
    "partial b=16": ["offpolicy.source=partial", "offpolicy.token_budget=16"],
}
# Bytes a stored response keeps per position: prompt ids (int64) and mask (bool); response
# ids (int64), mask (bool), sampler, behaviour log-probs and entropies (float32 each).
PROMPT_BYTES, RESPONSE_BYTES = 8 + 1, 8 + 1 + 4 + 4 + 4


def tensor_bytes(obj) -> int:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if hasattr(obj, "__dict__"):
        return sum(tensor_bytes(v) for v in vars(obj).values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6, help="timed steps per arm")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every arm")
    args = parser.parse_args()

    import src.policy as policy_module
    from src.build import build_parts, build_trainer, compose_config
    from src.telemetry import RunWriter

    base = ["experiment=staleness_4x", "method=bapo", "logger.progress=false", *args.overrides]
    cfgs = {arm: compose_config([*base, *extra]) for arm, extra in ARMS.items()}
    gpu = compose_config(["experiment=gpu_staleness_4x", "device=cpu", "rollout=hf"])
    first = build_parts(next(iter(cfgs.values())), progress=True)  # one warm start for all arms
    forwards = {"n": 0}
    real = policy_module.response_logprobs

    def counted(*a, **kw):
        forwards["n"] += 1
        return real(*a, **kw)

    policy_module.response_logprobs = counted
    with tempfile.TemporaryDirectory() as tmp:
        arms = {}
        for arm, cfg in cfgs.items():
            own = (copy.deepcopy(first.model), first.tokenizer, first.info)  # each arm its own copy
            parts = build_trainer(cfg, RunWriter(Path(tmp) / arm.split()[0]), Path(tmp) / "ckpt",
                                  evaluate="none", device=first.device, task=first.task, model=own)
            parts.trainer.log_tokens = False  # telemetry is measured in bench_telemetry.py
            arms[arm] = (parts.trainer, parts.fresh_state(), [])
        for i in range(args.steps + 1):
            for _arm, (trainer, state, rows) in arms.items():
                forwards["n"] = 0
                updates_before = state.global_update
                record = trainer.train_step(state)
                state.step += 1
                if i > 0:
                    rows.append({**record, "forwards": forwards["n"],
                                 "updates": state.global_update - updates_before})
    policy_module.response_logprobs = real

    def med(rows, key):
        return statistics.median(r.get(key) or 0.0 for r in rows)

    fresh = med(arms["fresh"][2], "time_step_s")
    print("| arm | s/step | ratio to fresh | s/update | rollout | behaviour | updates | forwards/step | updates/step |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for arm, (_, _, rows) in arms.items():
        step, n_up = med(rows, "time_step_s"), med(rows, "updates")
        print(f"| {arm} | {step:.2f} | {step / fresh:.2f} | {step / max(n_up, 1):.3f} | "
              f"{med(rows, 'time_rollout_s'):.2f} | {med(rows, 'time_behavior_s'):.2f} | "
              f"{med(rows, 'time_update_s'):.2f} | {med(rows, 'forwards'):.0f} | {n_up:.0f} |")
    delay_trainer = arms["delay K=4"][0]
    held = delay_trainer.source.in_flight()
    per_rollout = tensor_bytes(held) / len(held)
    print(f"\nqueue, CPU default: {per_rollout / 2**20:.2f} MiB per stored rollout (measured, "
          f"{held[0].size} responses); delay_64 holds 16: {16 * per_rollout / 2**20:.1f} MiB, "
          f"delay_256 holds 64: {64 * per_rollout / 2**20:.1f} MiB")
    t = gpu.train
    responses = t.prompts_per_step * t.group_size
    for prompt_len in (256, 1024):
        size = responses * (prompt_len * PROMPT_BYTES + gpu.rollout.max_new_tokens * RESPONSE_BYTES)
        print(f"queue, GPU config ({responses} responses x {gpu.rollout.max_new_tokens} tokens, prompts "
              f"padded to {prompt_len}): {size / 2**20:.1f} MiB per rollout (computed from the shapes, at "
              f"full length), {16 * size / 2**30:.2f} GiB at K=16")


if __name__ == "__main__":
    from src.pinning import pin_process

    pin_process()  # before torch loads, as `python -m src.run` does
    main()
