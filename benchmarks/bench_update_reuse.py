"""Do the update's two speed shortcuts (src/update.py) pay? Each, on and off, in one run.

- kept forward: update 0 backpropagates through mini-batch 0's behaviour forward, run with
  grad, instead of a no-grad behaviour pass plus a forward of its own;
- on-policy decision: a micro-batched update with no optimizer step since the step's own pass
  decides on that pass's numbers instead of a no-grad pass of its own.

Both hand over the same numbers bit for bit, so turning one off changes no number: one run
alternates, step by step, between the shortcut on and off, and the same weights and data
pass through both. Reported per experiment: the median of the step's behaviour-pass plus
update seconds (the phases a shortcut touches; the rollout is the same code either way) with
the shortcut on and off, and their ratio (off / on: above 1, the shortcut saves that share).

    python benchmarks/bench_update_reuse.py                       # staleness_1x, ramble_4x
    python benchmarks/bench_update_reuse.py --steps 10 --experiment staleness_4x
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import _setup  # noqa: F401 - this checkout first on sys.path

from src.pinning import pin_process

SHORTCUTS = {
    "kept forward": [],
    # micro-batches of 2 responses, so that a decision is taken over the whole mini-batch
    "on-policy decision": ["train.micro_batch_size=2"],
}


def shortcut_switch(shortcut: str):
    """A function `on(flag)` that turns one shortcut on or off for the next steps (the module
    attributes the code reads)."""
    import src.minibatches as minibatches
    from src.update import Update

    if shortcut == "kept forward":
        real_pass = minibatches.behaviour_pass

        def no_kept_forward(scorer, data, first):
            return real_pass(scorer, data, first=False)

        return lambda on: setattr(minibatches, "behaviour_pass",
                                  real_pass if on else no_kept_forward)
    real_decision = Update.whole_batch_decision

    def no_reuse(self, mb, mask, adv, on_policy, seed):
        return real_decision(self, mb, mask, adv, False, seed)

    return lambda on: setattr(Update, "whole_batch_decision", real_decision if on else no_reuse)


def timed(experiment: str, shortcut: str, steps: int, overrides: list[str]) -> dict:
    from src.build import build_trainer, compose_config
    from src.telemetry import RunWriter

    cfg = compose_config([f"experiment={experiment}", "method=bapo", "logger.progress=false",
                          "train.threads=1", *SHORTCUTS[shortcut], *overrides])
    times = {True: [], False: []}
    switch = shortcut_switch(shortcut)
    with tempfile.TemporaryDirectory() as tmp:
        parts = build_trainer(cfg, RunWriter(Path(tmp) / "run"), Path(tmp) / "ckpt",
                              evaluate="none")
        trainer, state = parts.trainer, parts.fresh_state()
        trainer.log_tokens = False
        for i in range(2 * steps + 1):
            on = i % 2 == 1  # step 0 is a warm-up, then off, on, off, on, ...
            switch(on)
            record = trainer.train_step(state)
            state.step += 1
            if i > 0:
                times[on].append(record["time_behavior_s"] + record["time_update_s"])
        switch(True)
    on, off = statistics.median(times[True]), statistics.median(times[False])
    return {"experiment": experiment, "shortcut": shortcut, "on": on, "off": off,
            "ratio": off / on, "steps": steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", action="append",
                        help="default: staleness_1x and ramble_4x")
    parser.add_argument("--steps", type=int, default=6, help="timed steps per side")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run")
    args = parser.parse_args()
    print("| experiment | shortcut | on s | off s | off / on | steps a side |")
    print("|---|---|---:|---:|---:|---:|")
    for experiment in args.experiment or ["staleness_1x", "ramble_4x"]:
        for shortcut in SHORTCUTS:
            r = timed(experiment, shortcut, args.steps, args.overrides)
            print(f"| {experiment} | {shortcut} | {r['on']:.3f} | {r['off']:.3f} | "
                  f"{r['ratio']:.2f} | {r['steps']} |", flush=True)


if __name__ == "__main__":
    pin_process()
    main()
