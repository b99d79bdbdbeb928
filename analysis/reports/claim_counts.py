"""How many claims each verdict has, per suite and in all: the numbers a README quotes.

`claim_counts` makes figures/claim_counts.csv from the claims table, the raw verdicts and
those after Holm's correction (columns `<verdict> (Holm)`); `counts_in_report` reads the
same numbers back out of REPORT.md, so a test can check that the two agree and any text
quoting the CSV quotes what the report says.
"""

from __future__ import annotations

import re

import pandas as pd

from analysis.claims.rules import VERDICTS
from analysis.reports.markdown import by_construction

ALL = "all"  # the label of the row that sums every suite
HOLM = {v: f"{v} (Holm)" for v in VERDICTS}  # the counts after Holm's correction
BUILT = "by construction"  # rows shown but not counted: they hold by construction
COLUMNS = ["label", "suite", *VERDICTS, "total", BUILT, *HOLM.values()]
_HEADING = re.compile(r"^### (S\d+)\b")
_VERDICTS_LINE = re.compile(r"^Verdicts: (.*)\.$")
_HOLM_LINE = re.compile(r"^After Holm's correction over the \d+ tested rows: (.*)\.$")
_BUILT = re.compile(r"(\d+) by construction")
_COUNT = re.compile(r"(\d+) (" + "|".join(sorted(VERDICTS, key=len, reverse=True)) + ")")


def claim_counts(claims: pd.DataFrame, labels: dict[str, str]) -> pd.DataFrame:
    """One row per suite (in `labels` order: suite name -> short label) and a last row
    `all`: the number of claims of each verdict and their total, over the rows that are
    evidence; the rows that hold by construction are counted apart (`by construction`)."""
    rows = []
    for suite, label in labels.items():
        part = claims[claims["suite"] == suite]
        built = by_construction(part)
        evidence = part[~built]
        raw, holm = evidence["verdict"].value_counts(), evidence["holm_verdict"].value_counts()
        rows.append({"label": label, "suite": suite, BUILT: int(built.sum()),
                     **{v: int(raw.get(v, 0)) for v in VERDICTS},
                     **{HOLM[v]: int(holm.get(v, 0)) for v in VERDICTS}})
    counted = [*VERDICTS, BUILT, *HOLM.values()]
    table = pd.DataFrame(rows, columns=["label", "suite", *counted])
    total = {"label": ALL, "suite": "", **{v: int(table[v].sum()) for v in counted}}
    table = pd.concat([table, pd.DataFrame([total])], ignore_index=True)
    table["total"] = table[list(VERDICTS)].sum(axis=1)
    return table[COLUMNS]


def counts_in_report(text: str, holm: bool = False) -> dict[str, dict[str, int]]:
    """Per suite label: {verdict: count, 'by construction': count} from REPORT.md's
    'Verdicts: ...' line (with
    `holm`: its 'After Holm's correction ...' line) under each '### S<n>' heading of the
    claims section (S1 where the report has one suite)."""
    out: dict[str, dict[str, int]] = {}
    line_re = _HOLM_LINE if holm else _VERDICTS_LINE
    label = None
    for line in text.splitlines():
        if line == "## Paper claims":
            label = "S1"  # one suite: its claims have no heading of their own
            continue
        heading = _HEADING.match(line)
        if heading:
            label = heading.group(1)
            continue
        found = line_re.match(line)
        if found and label and label not in out:
            counts = {v: 0 for v in VERDICTS}
            counts.update({v: int(n) for n, v in _COUNT.findall(found.group(1))})
            built = _BUILT.search(found.group(1))
            counts[BUILT] = int(built.group(1)) if built else 0
            out[label] = counts
    return out
