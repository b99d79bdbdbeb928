"""The one module that judges claim rows (analysis/claims/schema.py), for every report.

A report's table builder finds each side's cell in its runs (a suite's cells, a lag's) and
hands `judge` what it measured; `judge` applies the row's test by the rules of
analysis/claims/rules.py (docs/statistics.md) and adds the notes every comparison gets: how
two cells' final evals are aligned (accuracy rows) and a gradient-norm clipping gap between
them. `table` then takes one table's rows together: Holm's correction over its tested rows,
with the rows that hold by construction shown but neither tested nor counted.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields, replace

import pandas as pd

from analysis.claims import distance, rules
from analysis.claims.rules import Claim
from analysis.claims.schema import Band, Direction, Match, NoChange, Reach, Row, ShareAbove
from analysis.core.final import alignment_note
from analysis.core.grad_clip import confound_note
from analysis.core.multiplicity import PILOT, with_holm
from analysis.core.search_ceiling import reach
from analysis.core.stats import fmt_ci, fmt_wilson, mean_ci

ACCURACY = ("final_sampled_acc", "final_greedy_acc")
# A row on fewer seeds is a pilot: no verdict, not among Holm's tests (docs/statistics.md).
# At 8 seeds the sd's 95% interval spans 0.66-2.0 times the measured sd; at 3, 0.52-6.3.
PILOT_SEEDS = 8
# How a row names its accuracy metric when it shows both (the primary one first).
METRIC_WORDS = {"final_sampled_acc": "sampled", "final_greedy_acc": "greedy"}


@dataclass
class Measured:
    """What a table builder found for one row at one level: each side's cell rows (one per
    run) and its quantity by seed, the sides' names, and what a count test reads."""

    frames: list[pd.DataFrame]
    values: list[pd.Series]
    names: tuple[str, ...]
    confound: str | None = None  # the per-run column of the gradient-norm clipped share
    also: list[pd.Series] = field(default_factory=list)  # each side's `row.also`, by seed
    pooled: tuple[int, int] = (0, 0)  # ShareAbove: agreeing and counted updates, pooled
    updates: pd.DataFrame = field(default_factory=pd.DataFrame)  # Reach: annotated updates

    @property
    def found(self) -> bool:
        return all(len(f) for f in self.frames)


def claim_of(row: Row, text: str | None = None, **fields) -> Claim:
    """The row's Claim before any measurement (`text`: its claim with placeholders filled)."""
    effect = math.nan if row.effect is None else row.effect
    return Claim(text or row.claim, row.paper, row.criterion, key=row.key, effect=effect,
                 **fields)


def judge(c: Claim, row: Row, m: Measured) -> Claim:
    """Apply the row's test to what was measured at one level."""
    test = row.test
    if isinstance(test, Reach):
        return reach_rule(c, m.updates)
    if not m.values or not all(len(v) for v in m.values):
        return c
    if len(row.sides) == 1:
        values = m.values[0]
        if isinstance(test, Band):
            return rules.in_range(c, values, test.low, test.high)
        if isinstance(test, Direction):
            return rules.directed(c, values, test.ref, test.direction)
        if isinstance(test, NoChange):
            return rules.no_change(c, values)
        if isinstance(test, ShareAbove):
            return rules.share_above(c, values, *m.pooled, test.threshold)
        raise TypeError(f"{row.key}: {type(test).__name__} needs two sides")
    if isinstance(test, Match):
        return match_rule(c, m, test.margin)
    if not isinstance(test, Direction):
        raise TypeError(f"{row.key}: two sides are compared by a Direction or a Match")
    out = rules.paired(c, m.values[0], m.values[1], m.names[:2], test.direction)
    return out if out.verdict == "no data" else with_also(with_notes(out, row, m), row, m)


def with_also(c: Claim, row: Row, m: Measured) -> Claim:
    """Beside the primary metric's comparison (which decides), the same comparison on the
    row's other accuracy metric: both shown, the primary first (docs/statistics.md)."""
    if not row.also or len(m.also) != 2 or not all(len(v) for v in m.also):
        return c
    other = rules.paired(Claim("", "", ""), m.also[0], m.also[1], m.names[:2],
                         row.test.direction)
    first, second = METRIC_WORDS[row.metric], METRIC_WORDS[row.also]
    c.measured = f"{first} (primary): {c.measured}; {second}: {other.measured}"
    c.basis = f"{first} (primary): {c.basis}; {second}: {other.basis}"
    return c


def constructed(c: Claim, row: Row, conditions: frozenset[str] = frozenset(),
                measure: str = "") -> Claim:
    """Mark a row that holds by construction where its condition holds (`conditions`: the
    names that hold for the table's runs; `always` always does): it keeps its verdict, shown,
    but loses its p, so it is neither among Holm's tests nor counted as evidence."""
    built = row.by_construction
    if built is None or c.verdict == "no data" or (built.when != "always"
                                                   and built.when not in conditions):
        return c
    c.by_construction = built.why + (f" ({measure})" if measure else "")
    c.p, c.leans = math.nan, ""
    return c


def with_notes(c: Claim, row: Row, m: Measured) -> Claim:
    """The notes of a comparison of two different cells: the alignment of their final evals
    (accuracy rows) and a gradient-norm clipping gap of 5 points or more."""
    if row.sides[0].cell == row.sides[1].cell:  # two numbers of the same runs
        return c
    a, b = m.frames[0], m.frames[1]
    notes = []
    if row.sides[0].quantity in ACCURACY:
        notes.append(alignment_note(a, b, m.names[:2]))
        notes += [learning_note(f, name, row.sides[0].quantity)
                  for f, name in zip(m.frames[:2], m.names[:2], strict=True)]
    if m.confound and m.confound in a and m.confound in b:
        notes.append(confound_note(_by_seed(a, m.confound), _by_seed(b, m.confound),
                                   m.names[:2]))
    return add_note(c, *notes)


def learning_note(cell: pd.DataFrame, name: str, metric: str) -> str:
    """'bapo does not learn here: sampled gain over its warm start +0.001 ± 0.027 (n=8)'
    when the cell's final accuracy does not lie wholly above its step-0 eval (the 95%
    interval of the per-run gain reaches 0): a comparison of methods that do not learn
    says how they lose, not what they gain. '' when it learns, or has no interval."""
    gain = metric.replace("final_", "gain_")
    if gain not in cell:
        return ""
    m, low, high, n = mean_ci(cell[gain])
    if n < 2 or math.isnan(low) or low > 0:
        return ""
    return (f"{name} does not learn here: {METRIC_WORDS[metric]} gain over its warm start "
            f"{fmt_ci(m, low, high, n).replace(f'{m:.3f}', f'{m:+.3f}', 1)}")


def add_note(c: Claim, *texts: str) -> Claim:
    c.note = "; ".join(x for x in (c.note, *texts) if x)
    return c


def _by_seed(cell: pd.DataFrame, col: str) -> pd.Series:
    return cell.set_index("seed")[col].astype(float)


def across_levels(c: Claim, parts: dict[int, Claim]) -> Claim:
    """One row from its test at each staleness level (rules.across_levels)."""
    return rules.across_levels(c, parts)


def fresh(c: Claim) -> Claim:
    return replace(c)


def reach_rule(c: Claim, u: pd.DataFrame) -> Claim:
    """What Algorithm 1 promises: of the updates that start below rho0, the search reaches
    it wherever some bounds in its grid do (analysis/core/search_ceiling.py). Held when the
    reached share equals that ceiling, not held when it falls short. The search is
    deterministic given an update's tokens, so this is a count, not an estimate: no test,
    and no place among the rows Holm's correction counts."""
    if u.empty:
        return c
    c.experiments = ", ".join(sorted(set(u["experiment"])))
    r = reach(u)
    defined = u[u["outcome"] != "undefined"]
    ends = int((pd.to_numeric(defined["rho"], errors="coerce")
                >= pd.to_numeric(defined["rho0"])).sum())
    c.measured = (f"start below rho0: {fmt_wilson(r.below, r.updates)}; of those, the grid "
                  f"can reach it (ceiling): {fmt_wilson(r.ceiling, r.below)}; the search "
                  f"reached it: {fmt_wilson(r.reached, r.below)}")
    c.basis = f"reached {r.reached} of {r.ceiling} reachable ({r.below} below rho0)"
    c.value = r.reached / r.below if r.below else math.nan
    counted = ("a count over pooled steady updates (Wilson intervals, descriptive: a run's "
               "updates are not independent), not a test: not among Holm's")
    if not r.readable:
        c.verdict, c.note = "not settled", "the ceiling cannot be read (value reading or grid unknown)"
    elif not r.below:
        c.verdict, c.note = "not settled", "no update started below rho0: nothing to reach"
    else:
        c.verdict = "held" if r.stopped_short == 0 else "not held"
        rest = ("the rest at the grid's maximum, below rho0" if r.stopped_short == 0 else
                f"{r.stopped_short} stopped short of the grid's end without reaching it")
        c.note = f"ends at rho >= rho0 in {ends} of {r.updates} updates, {rest}; {counted}"
    return c


def match_rule(c: Claim, m: Measured, margin: float) -> Claim:
    """a matches b: held when the paired difference's 95% interval lies above -margin, not
    held when it lies below it; both cells and the seeds within the margin beside it."""
    d = m.values[0].sub(m.values[1]).dropna()
    if not len(d):
        return c
    c = rules.directed(c, d, -margin, rules.UP)
    c.sd = float(d.std(ddof=1)) if len(d) > 1 else math.nan
    c = add_note(c, alignment_note(m.frames[0], m.frames[1], m.names[:2]))
    cells = " vs ".join(f"{name} {fmt_ci(*mean_ci(v))}"
                        for name, v in zip(m.names, m.values, strict=True))
    c.measured = (f"{cells}; paired {m.names[0].split(' @ ')[0]} − on-policy "
                  f"{m.names[1].split(' @ ')[0]} {c.measured} ({int((d > -margin).sum())}"
                  f" of {len(d)} seeds within {margin})")
    return c


def table(claims: list[Claim] | pd.DataFrame) -> pd.DataFrame:
    """One table's judged rows: pilots marked, Holm's correction over its tested rows, and
    how many seeds each unsettled paired row would need (analysis/claims/distance.py)."""
    frame = claims if isinstance(claims, pd.DataFrame) else pd.DataFrame(
        [c.__dict__ for c in claims], columns=list(Claim.__dataclass_fields__))
    frame = frame.assign(**{f.name: f.default for f in fields(Claim)
                            if f.name not in frame and f.default is not MISSING})
    frame = with_holm(as_pilots(frame))
    frame[distance.COLUMN] = distance.seeds_column(frame)
    return frame


def as_pilots(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows that rest on 1 to PILOT_SEEDS - 1 seeds get no verdict: `pilot` (their numbers,
    note and p stay; they leave Holm's tests). A row that holds by construction keeps its
    verdict (it does not rest on the seeds); a row of exact counts has no seeds (0)."""
    out = frame.copy()
    seeds = pd.to_numeric(out["seeds"], errors="coerce").fillna(0)
    built = out["by_construction"].fillna("").astype(str) != ""
    pilot = (out["verdict"] != "no data") & seeds.between(1, PILOT_SEEDS - 1) & ~built
    out.loc[pilot, "verdict"] = PILOT
    return out
