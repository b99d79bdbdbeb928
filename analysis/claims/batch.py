"""Staleness against data and batch size on the ramble testbed: the rows that read the 1x
control at the 4x update size (`ramble_1x_b32`, sweep `testbed_batch_control`).

At equal updates (120 each) the grid's 1x trains on 120 rollouts of 128 responses per
update and its 4x on 30 rollouts in mini-batches of 32, so 4x - 1x mixes staleness with data
and batch size. The control is on-policy with 32 responses per update and a fresh rollout
each update: 4x - 1x_b32 is the cost of staleness at equal update size and equal data,
1x_b32 - 1x the cost of the smaller batch and the quarter of the data at equal updates. The three cells sit in two suites (the control draws 4
prompts a step, the grid 16), so these rows name their cells by experiment and read the
whole run summary; paired by seed (the same 8 seeds, fixed before the runs). Primary metric
greedy, as the control's sweep declared before its runs; sampled beside it.
"""

from __future__ import annotations

import pandas as pd

from analysis.claims.paper import Suite, judge_declared_rows
from analysis.claims.schema import DOWN, Cell, Direction, Row, Side

CONTROL_SWEEP = "testbed_batch_control"
GREEDY, SAMPLED = "final_greedy_acc", "final_sampled_acc"
EQUAL_UPDATES, EQUAL_SIZE, CONTROL = "ramble_1x", "ramble_4x", "ramble_1x_b32"
MISSING = f"no runs of these cells here (sweep `{CONTROL_SWEEP}`)"


def _ppo(experiment: str, name: str) -> Side:
    return Side(Cell("ppo", experiment=experiment), GREEDY, name)


def _row(key: str, claim: str, paper: str, a: tuple[str, str], b: tuple[str, str]) -> Row:
    return Row(key, claim, "Fig. 2", paper,
               f"paired by seed: final greedy accuracy of {a[1]} minus {b[1]} below 0",
               (_ppo(*a), _ppo(*b)), Direction(DOWN), metric=GREEDY, also=SAMPLED,
               missing=MISSING)


ROWS: tuple[Row, ...] = (
    _row("reuse_and_batch", "Staleness costs accuracy at equal updates: ppo 4x - 1x (120 "
         "updates each; 1x sees 128 responses per update, 4x 32, a quarter of the data)",
         "staleness costs (the premise of Fig. 2)", (EQUAL_SIZE, "4x"), (EQUAL_UPDATES, "1x")),
    _row("reuse", "Staleness costs accuracy at equal update size and data: ppo 4x - 1x_b32 "
         "(32 responses per update, 3,840 in all, each; 4x trains each rollout over 4 "
         "updates, its mini-batches 0-3 updates stale)",
         "staleness costs (the premise of Fig. 2)", (EQUAL_SIZE, "4x"), (CONTROL, "1x_b32")),
    _row("batch", "The smaller batch costs accuracy at equal updates: ppo 1x_b32 - 1x (both "
         "on-policy; 32 against 128 responses per update, a quarter of the data)",
         "not the paper's: the control that separates batch size and data from staleness",
         (CONTROL, "1x_b32"), (EQUAL_UPDATES, "1x")),
)


def batch_claims(summary: pd.DataFrame) -> pd.DataFrame:
    """The rows over the whole run summary (every suite: the control is a suite of its
    own); empty when none of their cells is here."""
    if not summary["experiment"].isin({EQUAL_UPDATES, EQUAL_SIZE, CONTROL}).any():
        return pd.DataFrame()
    suite = Suite(summary)
    return pd.DataFrame([c.__dict__ for c in judge_declared_rows(suite, ROWS)])
