"""What per-token telemetry adds to a training step, measured side by side in one process.

Alternates steps with token logging on and off on the same trainer (same model, same
config), so machine noise hits both arms alike, and reports the ratio of mean step times
along with the in-step telemetry share (`time_telemetry_s / time_step_s`).

    python benchmarks/bench_telemetry.py                       # CPU default model, staleness 4x
    python benchmarks/bench_telemetry.py --steps 6 -- model.architecture.hidden_size=64
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import _setup  # noqa: F401 - this checkout first on sys.path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8, help="steps per arm")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for the run config")
    args = parser.parse_args()

    from src.build import build_trainer, compose_config
    from src.telemetry import RunWriter

    cfg = compose_config(["experiment=staleness_4x", "method=bapo", "logger.progress=false",
                          *args.overrides])
    with tempfile.TemporaryDirectory() as tmp:
        writer = RunWriter(Path(tmp))
        parts = build_trainer(cfg, writer, Path(tmp) / "ckpt", evaluate="none", progress=True)
        trainer, state = parts.trainer, parts.fresh_state()
        arms: dict[bool, list[float]] = {True: [], False: []}
        shares: list[float] = []
        for i in range(2 * args.steps):
            trainer.log_tokens = i % 2 == 0
            record = trainer.train_step(state)
            state.step += 1
            # Exclude the rollout: its length varies step to step and logging does not touch it.
            arms[trainer.log_tokens].append(record["time_step_s"] - record["time_rollout_s"])
            if trainer.log_tokens:
                shares.append(record["time_telemetry_s"] / record["time_step_s"])
        writer.close()
    on, off = statistics.mean(arms[True]), statistics.mean(arms[False])
    print(f"| arm | mean step time without rollout (s) | steps |\n|---|---:|---:|\n"
          f"| tokens logged | {on:.3f} | {len(arms[True])} |\n| tokens off | {off:.3f} | {len(arms[False])} |")
    print(f"\nratio on/off (behaviour pass + updates + telemetry): {on / off:.3f}")
    print(f"telemetry share of the whole step (rollout included), median: {statistics.median(shares):.1%}")


if __name__ == "__main__":
    from src.pinning import pin_process

    pin_process()  # before torch loads, as `python -m src.run` does
    main()
