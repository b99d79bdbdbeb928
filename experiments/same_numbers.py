"""Does a code change move a number? Short runs of the same cells by two checkouts, compared
record by record and token row by token row (experiments/verify_cell.py's comparison).

    git worktree add --detach ../before <commit before the change>
    python experiments/same_numbers.py --before ../before --out /tmp/same_numbers

Each cell runs `python -m src.run <cell> train.steps=STEPS` once in each checkout (its own
interpreter, one thread, the eval at the last step only), into OUT/before/<cell> and
OUT/after/<cell>. A cell is "bit-identical" when every metrics.jsonl record but the `time_*`
fields and every token row is equal; the exit code is 1 when any cell differs or fails.
Runs already in OUT are reused, so a stopped comparison resumes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from experiments.verify_cell import compare_metrics, compare_tokens  # noqa: E402

# The cells a change to the update must leave alone (issue of the one-update redesign): each
# staleness, a delay queue, replay, partial rollouts, the pretrained smoke testbed, a mismatch
# cell, the micro-batched update and a decision taken once per rollout.
CELLS = {
    "staleness_1x": ["experiment=staleness_1x", "method=bapo"],
    "staleness_2x": ["experiment=staleness_2x", "method=bapo"],
    "staleness_4x": ["experiment=staleness_4x", "method=bapo"],
    "delay_16": ["experiment=delay_16", "method=bapo"],
    "replay": ["experiment=replay", "method=ppo"],
    "partial": ["experiment=partial", "method=clip_higher"],
    "ramble_4x": ["experiment=ramble_4x", "method=bapo"],
    "smol_smoke": ["experiment=smol_smoke", "method=bapo"],
    "int8_tis": ["experiment=staleness_4x", "method=bapo", "rollout.precision=int8",
                 "correction=tis"],
    "micro_batched": ["experiment=staleness_4x", "method=bapo", "train.micro_batch_size=2"],
    "rollout_decision": ["experiment=staleness_4x", "method=top_entropy",
                         "method.top_entropy.scope=rollout"],
}


def run_cell(tree: Path, overrides: list[str], run_dir: Path, steps: int) -> str | None:
    """Run one cell in `tree`; None, or the tail of its error."""
    status = run_dir / "status.json"
    if status.exists() and '"finished"' in status.read_text():
        return None
    cmd = [sys.executable, "-m", "src.run", *overrides, f"train.steps={steps}",
           f"eval.at=[{steps}]", "train.threads=1", "logger.progress=false",
           f"hydra.run.dir={run_dir}", f"cache_dir={run_dir.parent.parent / 'cache'}"]
    done = subprocess.run(cmd, cwd=tree, capture_output=True, text=True)
    return None if done.returncode == 0 else done.stderr.strip()[-600:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", type=Path, required=True, help="checkout of the old code")
    ap.add_argument("--after", type=Path, default=REPO, help="checkout of the new code")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--cell", action="append", choices=sorted(CELLS), help="default: all")
    args = ap.parse_args(argv)
    worst = 0
    for name in args.cell or list(CELLS):
        dirs = {side: args.out / side / name for side in ("before", "after")}
        errors = [run_cell(tree, CELLS[name], dirs[side], args.steps)
                  for side, tree in (("before", args.before), ("after", args.after))]
        if any(errors):
            print(f"{name}: failed to run: {next(e for e in errors if e)}")
            worst = 1
            continue
        problems = (compare_metrics(dirs["before"], dirs["after"])
                    + compare_tokens(dirs["before"], dirs["after"]))
        print(f"{name}: {'bit-identical' if not problems else 'DIFFERS'}", flush=True)
        for problem in problems:
            print(f"  {problem}")
        worst = max(worst, 1 if problems else 0)
    return worst


if __name__ == "__main__":
    sys.exit(main())
