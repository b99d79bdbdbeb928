"""How much of the update-to-update noise in the positive share comes from how a rollout is
split into mini-batches.

    python experiments/calibration/split_noise.py runs/calibration/V01_guess_4x/seed0 [...]

The positive share of a mini-batch at r ~ 1 is S+ / (S+ + S-), S+- the sum of |A| over its
positive / negative tokens. With group-normalised advantages a whole group contributes equal
|A| mass to each sign, weighted by its responses' lengths, so a mini-batch of whole groups
has a share set by length alone; a mini-batch of responses drawn across groups (the
`minibatch` mode's shuffle) also carries each group's sign imbalance. For each step of a
run (full token rows), this recomputes the share of k mini-batches two ways on the same
responses: the logged split (responses shuffled across groups), and k splits of whole
groups (seeded); then the sd over mini-batches of each. |A| per token stands in for |r A|
(ratios are within a few percent of 1 at 4x).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml


def share(frame: pd.DataFrame) -> float:
    a = frame["advantage"]
    pos, neg = a[a > 0].abs().sum(), a[a < 0].abs().sum()
    return pos / (pos + neg) if pos + neg > 0 else np.nan


def split_shares(tokens: pd.DataFrame, k: int, seed: int = 0) -> pd.DataFrame:
    """Per step: the share of each logged mini-batch and of k whole-group mini-batches."""
    rng = np.random.default_rng(seed)
    rows = []
    for step, t in tokens.groupby("step"):
        for _update, mb in t.groupby("update"):
            rows.append({"step": step, "split": "responses (logged)", "share": share(mb)})
        groups = t["group_id"].unique()
        rng.shuffle(groups)
        for part in np.array_split(groups, k):
            rows.append({"step": step, "split": "whole groups", "share": share(t[t["group_id"].isin(part)])})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args()
    for run in args.runs:
        parts = sorted((run / "tokens").glob("step_*.parquet"))
        if not parts:
            print(f"{run}: no full token rows (tokens/step_*.parquet)", file=sys.stderr)
            raise SystemExit(2)
        k = yaml.safe_load((run / "config.yaml").read_text())["train"]["staleness"]
        t = pd.concat([pd.read_parquet(p, columns=["step", "update", "group_id", "advantage", "in_loss"])
                       for p in parts])
        t = t[t["in_loss"] & (t["update"] < k)]  # the first pass: every response once
        s = split_shares(t, k).groupby("split")["share"].agg(["mean", "std", "count"])
        print(f"{run} (k={k}):\n{s.round(4).to_string()}\n")


if __name__ == "__main__":
    main()
