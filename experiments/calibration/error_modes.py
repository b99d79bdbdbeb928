"""Why responses fail: each sampled chain-sum response classified against its prompt.

    python experiments/calibration/error_modes.py runs/calibration/D01_lr1e-4/seed0 [...]
        [--steps 0,1,2,27,28,29] [--out experiments/calibration/error_modes.csv]

A response `a+b=c, c+d=e, ... Answer: z` to the prompt `t1+t2+...=?` fails in one of these
ways, checked step by step in this order: `copy` (the term it adds is not the prompt's next
term), `carry` (it continues from another partial sum than the last), `add` (a wrong sum),
`steps` (too few or too many additions), `answer` (the final answer differs from the last
partial sum), `format` (no `a+b=c` step at all); otherwise `ok`. Reads the run's token rows
(update 0 of each step: the rollout as sampled), rebuilds each step's prompts from the
task config and the run's position in the problem stream, and decodes with the run's own
warm-start tokenizer. Prints shares per step and per number of terms; --out appends rows.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import src.compose  # noqa: E402, F401 - every registry the config's checks read
from src.config import validate  # noqa: E402
from src.run_vocab import upgrade_method_layout  # noqa: E402
from src.schedule import rollout_prompts  # noqa: E402
from src.tasks import get_task  # noqa: E402

_STEP = re.compile(r"(\d+)\+(\d+)=(\d+)")
_ANSWER = re.compile(r"Answer:\s*(-?\d+)")


def classify(terms: list[int], text: str) -> str:
    steps = [tuple(map(int, m)) for m in _STEP.findall(text)]
    if not steps:
        return "format"
    total = terms[0]
    for i, (a, b, c) in enumerate(steps):
        if i + 1 >= len(terms):
            return "steps"
        if a != total:
            return "carry"
        if b != terms[i + 1]:
            return "copy"
        if c != a + b:
            return "add"
        total = c
    if len(steps) != len(terms) - 1:
        return "steps"
    answer = _ANSWER.search(text)
    return "ok" if answer and int(answer.group(1)) == total else "answer"


def run_rows(run_dir: Path, steps: list[int] | None) -> pd.DataFrame:
    from transformers import PreTrainedTokenizerFast

    # pilots run before the per-method parameter sections existed are read in today's layout
    cfg = validate(upgrade_method_layout(yaml.safe_load((run_dir / "config.yaml").read_text())))
    meta = json.loads((run_dir / "meta.json").read_text())
    warm = Path(meta["warm_start"])
    tokenizer = PreTrainedTokenizerFast.from_pretrained(warm)
    start = json.loads((warm / "info.json").read_text())["next_train_index"]
    task = get_task(cfg.task.name, **dict(cfg.task.params))
    per_step = rollout_prompts(cfg.train)
    parts = sorted((run_dir / "tokens").glob("step_*.parquet"))
    rows = []
    for part in parts:
        step = int(part.stem.split("_")[1])
        if steps is not None and step not in steps:
            continue
        t = pq.read_table(part, columns=["update", "response_id", "group_id", "position",
                                         "token_id"]).to_pandas()
        t = t[t["update"] == t["update"].min()]
        for _, g in t.groupby("response_id"):
            g = g.sort_values("position")
            problem = task.problem(start + step * per_step + int(g["group_id"].iloc[0]))
            terms = [int(x) for x in problem.prompt.strip().removesuffix("=?").split("+")]
            text = tokenizer.decode(g["token_id"].tolist(), skip_special_tokens=True)
            rows.append({"run": str(run_dir), "step": step, "terms": len(terms),
                         "mode": classify(terms, text)})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--steps", default=None, help="comma-separated step indices")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    steps = [int(s) for s in args.steps.split(",")] if args.steps else None
    frames = [run_rows(r, steps) for r in args.runs]
    df = pd.concat(frames)
    for run, g in df.groupby("run"):
        print(f"== {run}")
        print(pd.crosstab(g["step"], g["mode"], normalize="index").round(3).to_string())
        print(pd.crosstab(g["terms"], g["mode"], normalize="index").round(3).to_string())
    if args.out:
        table = (df.groupby(["run", "step", "terms", "mode"]).size().rename("responses")
                 .reset_index())
        header = not args.out.exists()
        table.to_csv(args.out, mode="a", header=header, index=False)


if __name__ == "__main__":
    main()
