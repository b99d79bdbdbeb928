"""Does any of the 2025-26 clip family beat bapo or ppo? The clip_family sweep's claim rows.

Declared with their expectations before any run (experiments/sweeps.yaml `clip_family`):
sapo, dppo_tv, gppo, ce_gppo, dcpo and aspo on the ramble testbed at 4x (`ramble_4x`) and
behind the delay queue at lag 16-19 (`ramble_delay_4`), seeds 0-2, each paired by seed
against bapo and ppo (testbed_grid's and testbed_lags' committed 8 seeds: the 3 in common
pair), plus the control that separates sapo's gate from its aggregation: sapo minus sapo run
at token-mean. Primary metric final greedy accuracy (declared before the runs), sampled
beside it; Holm over the whole table (26 rows).

The sweep expects every method within +-0.05 of ppo and of bapo with each paired interval
holding 0. The schema has no two-sided test of a paired difference (Direction is one-sided,
Match a one-sided margin), so each row asks the question the family's papers put, that the
new rule gains accuracy (above 0); its p is the paired t-test's two-sided one, and a row
whose interval lies below 0 reads `not held`: the two sides of the question stay apart.
"""

from __future__ import annotations

import pandas as pd

from analysis.claims import verdicts
from analysis.claims.paper import Suite, judge_declared_rows
from analysis.claims.schema import UP, Cell, Direction, Row, Side
from analysis.core.runs import Run

SWEEP = "clip_family"
GREEDY, SAMPLED = "final_greedy_acc", "final_sampled_acc"
EXPERIMENTS = ("ramble_4x", "ramble_delay_4")
FAMILY = ("sapo", "dppo_tv", "gppo", "ce_gppo", "dcpo", "aspo")
# Each method's source (docs/methods.md "The 2025-26 clip family").
SOURCES = {"sapo": "arXiv 2511.20347", "dppo_tv": "arXiv 2602.04879",
           "gppo": "arXiv 2508.07629", "ce_gppo": "arXiv 2509.20712",
           "dcpo": "arXiv 2509.02333", "aspo": "arXiv 2510.06062"}
BASELINE, PROPOSED = "ppo", "bapo"
# Read beside the family, not rerun: testbed_grid's (ramble_4x) and testbed_lags' cells.
REFERENCES = (BASELINE, "clip_higher", PROPOSED)
CONTROL = "sapo (token-mean)"  # sapo's gate without its per-response aggregation
# Every method label the report reads, in the order its tables show them.
METHODS = (*REFERENCES, FAMILY[0], CONTROL, *FAMILY[1:])
RHO0 = 0.4  # bapo's target positive share (the paper's; conf/method/bapo.yaml)
EXPECTED = "within ±0.05, not settled (sweeps.yaml)"


def method_label(run: Run) -> str:
    """A run's method as the rows name it: `sapo (token-mean)` for sapo run with
    `method.aggregation=token-mean` (its own config aggregates per response), else the
    config's method.name. ppo and the others run token-mean by default, so the aggregation
    names a variant of sapo only."""
    name = run.method_name or run.method
    if name == "sapo" and run.cfg("method.aggregation") == "token-mean":
        return CONTROL
    return name


def _side(method: str, experiment: str) -> Side:
    return Side(Cell(method, experiment=experiment), GREEDY, f"{method} {experiment}")


def _row(key: str, claim: str, paper: str, a: str, b: str, experiment: str) -> Row:
    return Row(key, claim, "clip family", paper,
               f"paired by seed: final greedy accuracy of {a} minus {b} at {experiment} above 0 "
               "(the family's question, one-sided as the schema's tests are; the sweep "
               "expects the interval to hold 0; below 0 reads `not held`)",
               (_side(a, experiment), _side(b, experiment)), Direction(UP), metric=GREEDY,
               also=SAMPLED, missing=f"no runs of these cells here (sweep `{SWEEP}`)")


def _versus(method: str, reference: str, experiment: str) -> Row:
    return _row(f"{method}_vs_{reference}_{experiment}",
                f"{method} beats {reference} at {experiment} (final greedy accuracy)",
                f"{method} ({SOURCES[method]}); expected {EXPECTED}", method, reference,
                experiment)


def _control(experiment: str) -> Row:
    return _row(f"sapo_aggregation_{experiment}",
                f"sapo's per-response aggregation gains over its gate alone at {experiment}: "
                f"sapo minus {CONTROL} (final greedy accuracy)",
                "the control: sapo at token-mean within ±0.03 of ppo (sweeps.yaml); what sapo "
                "shows beyond it is its aggregation", "sapo", CONTROL, experiment)


ROWS: tuple[Row, ...] = (
    *(_versus(m, ref, e) for e in EXPERIMENTS for ref in (PROPOSED, BASELINE) for m in FAMILY),
    *(_control(e) for e in EXPERIMENTS),
)


def clip_family_claims(summary: pd.DataFrame) -> pd.DataFrame:
    """The rows judged over a run summary whose `method` column holds each run's
    `method_label`, with Holm's correction over all of them, each with its row's key
    (what the figure and a CSV reader find it by); `no data` rows say which sweep makes them."""
    suite = Suite(summary)
    claims = judge_declared_rows(suite, ROWS)
    return verdicts.table(claims)
