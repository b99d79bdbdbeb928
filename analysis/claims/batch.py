"""Staleness against data and batch size: the rows that read a testbed's 1x control at its
4x update size (the ramble testbed's `ramble_1x_b32`, sweep `testbed_batch_control`; the
pretrained testbed's `smol_1x_b8`, sweep `smol_grid`).

At equal updates (120 each) a grid's 1x trains on a fresh rollout per update (ramble: 128
responses per update; smol: 32) and its 4x on a quarter as many rollouts in mini-batches of a
quarter the size (32; 8), so 4x - 1x mixes staleness with data and batch size. The control is
on-policy at the 4x update size with a fresh rollout each update: 4x - control is the cost of
staleness at equal update size and equal data, control - 1x the cost of the smaller batch
and the quarter of the data at equal updates. The three cells sit in two suites (the control
draws a quarter of the prompts a step), so these rows name their cells by experiment and read
the whole run summary; paired by seed (the same seeds, fixed before the runs). Primary metric
as each sweep declared before its runs: greedy on the ramble testbed, sampled on the
pretrained one; the other beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis.claims.paper import Suite, judge_declared_rows
from analysis.claims.schema import DOWN, Cell, Direction, Row, Side

GREEDY, SAMPLED = "final_greedy_acc", "final_sampled_acc"


@dataclass(frozen=True)
class BatchControl:
    """One testbed's three cells, their update sizes and the sweep that makes the control."""

    prefix: str  # the testbed's experiment prefix: ramble_1x, ramble_4x, ramble_1x_<control>
    control: str  # the control's label, 1x_b32
    full: int  # responses per 1x update
    total: str  # responses over the 120 updates of 4x and of the control, as written
    sweep: str
    metric: str  # the primary metric its sweep declared
    key_prefix: str = ""  # row keys: the ramble testbed's stay as committed

    @property
    def size(self) -> int:
        """Responses per 4x mini-batch and per control update: a quarter of 1x's."""
        return self.full // 4

    @property
    def equal_updates(self) -> str:
        return f"{self.prefix}_1x"

    @property
    def equal_size(self) -> str:
        return f"{self.prefix}_4x"

    @property
    def experiment(self) -> str:
        return f"{self.prefix}_{self.control}"

    @property
    def experiments(self) -> set[str]:
        return {self.equal_updates, self.equal_size, self.experiment}

    @property
    def metric_name(self) -> str:
        return "greedy" if self.metric == GREEDY else "sampled"

    def rows(self) -> tuple[Row, ...]:
        size, also = self.size, SAMPLED if self.metric == GREEDY else GREEDY
        missing = f"no runs of these cells here (sweep `{self.sweep}`)"

        def row(key: str, claim: str, paper: str, a: tuple[str, str], b: tuple[str, str]) -> Row:
            sides = tuple(Side(Cell("ppo", experiment=e), self.metric, n) for e, n in (a, b))
            return Row(self.key_prefix + key, claim, "Fig. 2", paper,
                       f"paired by seed: final {self.metric_name} accuracy of {a[1]} minus "
                       f"{b[1]} below 0", sides, Direction(DOWN), metric=self.metric,
                       also=also, missing=missing)

        return (
            row("reuse_and_batch", "Staleness costs accuracy at equal updates: ppo 4x - 1x (120 "
                f"updates each; 1x sees {self.full} responses per update, 4x {size}, a quarter "
                "of the data)", "staleness costs (the premise of Fig. 2)",
                (self.equal_size, "4x"), (self.equal_updates, "1x")),
            row("reuse", "Staleness costs accuracy at equal update size and data: ppo 4x - "
                f"{self.control} ({size} responses per update, {self.total} in all, each; 4x "
                "trains each rollout over 4 updates, its mini-batches 0-3 updates stale)",
                "staleness costs (the premise of Fig. 2)", (self.equal_size, "4x"),
                (self.experiment, self.control)),
            row("batch", f"The smaller batch costs accuracy at equal updates: ppo {self.control} "
                f"- 1x (both on-policy; {size} against {self.full} responses per update, a "
                "quarter of the data)",
                "not the paper's: the control that separates batch size and data from staleness",
                (self.experiment, self.control), (self.equal_updates, "1x")),
        )


CONTROLS = (
    BatchControl("ramble", "1x_b32", 128, "3,840", "testbed_batch_control", GREEDY),
    BatchControl("smol", "1x_b8", 32, "960", "smol_grid", SAMPLED, key_prefix="smol_"),
)


def controls_present(summary: pd.DataFrame) -> list[BatchControl]:
    """The testbeds with at least one of their three cells in `summary`."""
    return [c for c in CONTROLS if summary["experiment"].isin(c.experiments).any()]


def batch_claims(summary: pd.DataFrame) -> pd.DataFrame:
    """The rows of every testbed with a cell here, over the whole run summary (every suite:
    the control is a suite of its own); empty when none of their cells is here."""
    present = controls_present(summary)
    if not present:
        return pd.DataFrame()
    suite = Suite(summary)
    return pd.DataFrame([c.__dict__ for control in present
                         for c in judge_declared_rows(suite, control.rows())])
