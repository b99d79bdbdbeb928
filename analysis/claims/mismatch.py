"""Is BAPO robust to the training-inference mismatch? The mismatch grid's claim rows.

Declared with their expectations before any run (experiments/sweeps.yaml `mismatch_grid`):
the ramble testbed at 4x with an int8 (W8A8) sampler under no correction, `tis` and
`seq_mis`, beside the fp32 sampler (testbed_grid's committed ramble_4x cells, same seeds).
A cell is a method in one *setting*, `<rollout.precision>/<correction.name>`, which the
report puts in the summary's experiment column, so the rows name their cells by setting.
Paired by seed; primary metric sampled accuracy (declared before the runs), greedy beside it;
Holm over the four rows.
"""

from __future__ import annotations

import pandas as pd

from analysis.claims import verdicts
from analysis.claims.paper import Suite, judge_declared_rows
from analysis.claims.schema import DOWN, UP, Cell, Direction, Row, Side

SWEEP = "mismatch_grid"
SAMPLED, GREEDY = "final_sampled_acc", "final_greedy_acc"
FP32, INT8, INT8_TIS, INT8_MIS = "fp32/none", "int8/none", "int8/tis", "int8/seq_mis"
PAPERS = "TIS (Yao et al. 2025), MIS (Liu et al. 2025)"


def setting(precision: str | None, correction: str | None) -> str:
    """A run's setting label: its sampler's precision and its correction's name (runs made
    before either existed: fp32, none)."""
    return f"{precision or 'fp32'}/{correction or 'none'}"


def _side(method: str, cell: str) -> Side:
    return Side(Cell(method, experiment=cell), SAMPLED, f"{method} {cell}")


def _row(key: str, claim: str, paper: str, a: tuple[str, str], b: tuple[str, str],
         direction: int) -> Row:
    word = "above" if direction == UP else "below"
    return Row(key, claim, "mismatch", paper,
               f"paired by seed: final sampled accuracy of {a[0]} {a[1]} minus {b[0]} {b[1]} "
               f"{word} 0", (_side(*a), _side(*b)), Direction(direction), metric=SAMPLED,
               also=GREEDY, missing=f"no runs of these cells here (sweep `{SWEEP}`)")


ROWS: tuple[Row, ...] = (
    _row("mismatch_costs", "The mismatch costs accuracy: ppo with the int8 sampler (no "
         "correction) minus ppo with the fp32 sampler", f"costs accuracy ({PAPERS})",
         ("ppo", INT8), ("ppo", FP32), DOWN),
    _row("tis_recovers", "Token TIS recovers it: ppo int8 with tis minus ppo int8 without",
         f"recovers ({PAPERS})", ("ppo", INT8_TIS), ("ppo", INT8), UP),
    _row("seq_mis_recovers", "Seq-MIS recovers it: ppo int8 with seq_mis minus ppo int8 "
         "without", f"recovers ({PAPERS})", ("ppo", INT8_MIS), ("ppo", INT8), UP),
    _row("bapo_absorbs", "BAPO's adaptive bounds absorb the mismatch without a correction: "
         "bapo int8 without minus ppo int8 with tis", "not claimed by the paper (the "
         "issue's question)", ("bapo", INT8), ("ppo", INT8_TIS), UP),
)


def mismatch_claims(summary: pd.DataFrame) -> pd.DataFrame:
    """The rows judged over a run summary whose `experiment` column holds each run's
    setting, with Holm's correction over them; `no data` rows say which sweep makes them."""
    suite = Suite(summary)
    claims = judge_declared_rows(suite, ROWS)
    return verdicts.table(claims)
