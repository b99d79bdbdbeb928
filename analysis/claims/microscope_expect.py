"""Each microscope claim judged against the expectation written before the study ran.

A claim's `expect` is prose, written before any part ran. Its `expect_check` (in
experiments/sweeps.yaml, beside it) transcribes that prose into checks a program applies, so a
row that went the writer's way and one that did not are judged by the same rule, and no range
is stretched after the fact ("at the top of" a range it lies outside). The checks:

- `verdict`: the row's final verdict (after Holm) equals it: held, not held, not settled, or
  measured (a row with no direction);
- `range: [low, high]`: the row's mean lies in it, ends included;
- `larger_than: <id>`: the row's mean is above that row's mean;
- `smallest_of: [<id>, ...]`: the row's |mean| is below each listed row's |mean|;
- `unchecked`: the clause of the prose that no check transcribes, carried to the report so a
  reader sees what was left to words.

A row is judged only once it and every row it refers to have a verdict: until then it is
pending (a pilot or no data), since a pilot's mean is not a finding. Once the study is
complete (every trunk its design plans is in), a row still a pilot or without data stays so:
its state is then final, and it is judged as it stands. A `verdict` check then misses (the
row was expected to end with that verdict and cannot), while a `range` or an order is read on
the pilot's mean, as the mean of every state the design planned.
"""

from __future__ import annotations

import pandas as pd

CHECKS = ("verdict", "range", "larger_than", "smallest_of", "unchecked")
FINAL_VERDICTS = ("held", "not held", "not settled", "measured")
# what a row can read, by the words it begins with
AS_EXPECTED, NOT_AS_EXPECTED, PENDING, PROSE_ONLY = ("as expected", "not as expected", "pending",
                                                     "in prose only")
OUTCOMES = (AS_EXPECTED, NOT_AS_EXPECTED, PENDING, PROSE_ONLY)


def validate(checks: dict[str, dict], ids: set[str]) -> None:
    """Refuse a malformed `expect_check` before any work: an unknown key, a verdict outside
    FINAL_VERDICTS, a range that is not [low, high], or a reference to a claim id that does
    not exist."""
    for claim_id, check in checks.items():
        where = f"experiments/sweeps.yaml: claim {claim_id}'s expect_check"
        unknown = sorted(set(check) - set(CHECKS))
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {unknown}; use {list(CHECKS)}")
        if "verdict" in check and check["verdict"] not in FINAL_VERDICTS:
            raise ValueError(f"{where}: verdict {check['verdict']!r} is not one of {list(FINAL_VERDICTS)}")
        if "range" in check:
            rng = check["range"]
            if not (isinstance(rng, list) and len(rng) == 2 and float(rng[0]) <= float(rng[1])):
                raise ValueError(f"{where}: range must be [low, high] with low <= high, got {rng!r}")
        refs = [check.get("larger_than"), *check.get("smallest_of", [])]
        missing = sorted(r for r in refs if r is not None and r not in ids)
        if missing:
            raise ValueError(f"{where}: refers to no claim {missing}; known ids: {sorted(ids)}")


def judge_expectations(judged: pd.DataFrame, checks: dict[str, dict],
                       study_complete: bool = False) -> pd.Series:
    """Per row of `judged` (analysis.claims.microscope.judge's table, with `holm_verdict`): 'as
    expected', 'not as expected: <what differs>', 'pending: <why>' or 'in prose only'
    (a row with no expect_check). `study_complete`: every planned trunk is in, so no row
    waits (analysis.claims.microscope_plan.missing_trunks)."""
    validate(checks, set(judged["id"]))
    rows = judged.set_index("id")
    return pd.Series([_judge_row(i, rows, checks.get(i), study_complete) for i in judged["id"]],
                     index=judged.index, name="expectation")


def _judge_row(claim_id: str, rows: pd.DataFrame, check: dict | None, complete: bool) -> str:
    if not check or set(check) == {"unchecked"}:
        return PROSE_ONLY
    involved = [claim_id, check.get("larger_than"), *check.get("smallest_of", [])]
    for other in filter(None, involved):
        final = rows.loc[other, "holm_verdict"]
        if final not in FINAL_VERDICTS and not complete:
            return f"{PENDING}: {final}" if other == claim_id else f"{PENDING}: {other} is {final}"
    empty = [other for other in filter(None, involved) if pd.isna(rows.loc[other, "mean"])]
    if empty:  # only once the study is complete: a row with a verdict has a mean
        return f"{NOT_AS_EXPECTED}: no data at the study's end ({', '.join(empty)})"
    mean = rows.loc[claim_id, "mean"]
    misses = []
    if "verdict" in check and rows.loc[claim_id, "holm_verdict"] != check["verdict"]:
        ended = "" if rows.loc[claim_id, "holm_verdict"] in FINAL_VERDICTS else " at the study's end"
        misses.append(f"{rows.loc[claim_id, 'holm_verdict']}{ended}, expected {check['verdict']}")
    if "range" in check:
        low, high = (float(x) for x in check["range"])
        if not low <= mean <= high:
            misses.append(f"mean {mean:.3g} outside [{low:g}, {high:g}]")
    if "larger_than" in check:
        ref = check["larger_than"]
        if not mean > rows.loc[ref, "mean"]:
            misses.append(f"mean {mean:.3g} not above {ref}'s {rows.loc[ref, 'mean']:.3g}")
    for ref in check.get("smallest_of", []):
        if not abs(mean) < abs(rows.loc[ref, "mean"]):
            misses.append(f"|mean| {abs(mean):.3g} not below {ref}'s {abs(rows.loc[ref, 'mean']):.3g}")
    return AS_EXPECTED if not misses else f"{NOT_AS_EXPECTED}: " + "; ".join(misses)


def unchecked_clauses(checks: dict[str, dict]) -> list[str]:
    """'- id: clause' for every expectation with a clause no check transcribes."""
    return [f"- {i}: {c['unchecked']}" for i, c in checks.items() if c.get("unchecked")]
