"""Holm's correction over the claim rows of one table (docs/statistics.md).

A table of 15 claims, each judged at 95%, settles about one by chance when nothing is
there. Holm's step-down method keeps the chance of settling any true-null row below 5%
across the whole table: sort the m tested rows' p-values, compare the i-th smallest with
0.05 / (m - i + 1), and stop at the first that fails. Its adjusted p-values say the same:
p_adj(i) = max over j <= i of min(1, (m - j + 1) p(j)); a row survives when p_adj < 0.05.

The family is one table: one suite's claims in REPORT.md, one lag report's claims. Rows
with no test (no data, one seed, a count rather than an estimate) and pilots (rows on fewer
seeds than a verdict needs, analysis/claims/verdicts.py) are not counted in m and keep
their verdict. The raw verdict stays beside the adjusted one; a tested row keeps its
raw `held`/`not held` after Holm only when its adjusted p is below 0.05, else it becomes
`not settled`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

ALPHA = 0.05
SETTLED = ("held", "not held")
PILOT = "pilot"  # a row given no verdict: too few seeds (not a test, not in m)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values in the input's order; NaN (untested) stays NaN and is not
    counted among the tests."""
    p = np.asarray(pvalues, dtype=float)
    tested = np.flatnonzero(~np.isnan(p))
    m = len(tested)
    out = np.full(len(p), np.nan)
    running = 0.0
    for rank, i in enumerate(tested[np.argsort(p[tested], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out.tolist()


def holm_alpha(pvalues: Sequence[float]) -> list[float]:
    """The level each tested row is compared with in Holm's steps, in the input's order:
    ALPHA / (m - i) for the i-th smallest p (i from 0; ties in input order, as `holm`);
    NaN for untested rows."""
    p = np.asarray(pvalues, dtype=float)
    tested = np.flatnonzero(~np.isnan(p))
    out = np.full(len(p), np.nan)
    for rank, i in enumerate(tested[np.argsort(p[tested], kind="stable")]):
        out[i] = ALPHA / (len(tested) - rank)
    return out.tolist()


def with_holm(claims: pd.DataFrame) -> pd.DataFrame:
    """`claims` (one table: columns verdict and p) with `tests` (m, the rows with a test
    that are not pilots), `holm_p`, `holm_alpha` (the level of the row's Holm step) and
    `holm_verdict` added."""
    out = claims.copy()
    p = pd.to_numeric(out["p"], errors="coerce") if "p" in out else pd.Series(np.nan, out.index)
    p = p.where(out["verdict"] != PILOT)
    out["holm_p"] = holm(p.tolist())
    out["holm_alpha"] = holm_alpha(p.tolist())
    out["tests"] = int(p.notna().sum())
    out["holm_verdict"] = [holm_verdict(v, q) for v, q in zip(out["verdict"], out["holm_p"],
                                                              strict=True)]
    return out


def holm_verdict(raw: str, adjusted_p: float) -> str:
    """A settled raw verdict survives when its Holm-adjusted p is below ALPHA. A row without
    a test keeps its verdict: an exact count (how a deterministic search ended) is no
    estimate to correct, and the other untested rows are not settled or have no data."""
    if raw not in SETTLED or math.isnan(adjusted_p):
        return raw
    return raw if adjusted_p < ALPHA else "not settled"


def fmt_holm(row: pd.Series) -> str:
    """'held (p 0.004, Holm 0.031 of 13 tests)', or why a row has no test."""
    verdict, tests = row["holm_verdict"], int(row["tests"])
    if str(row.get("by_construction", "") or "") not in ("", "nan"):
        return f"{verdict} (by construction; not among the {tests})"
    if verdict == PILOT:
        return f"{pilot_label(row['seeds'])}; not among the {tests} tests"
    if math.isnan(row["holm_p"]):
        return f"{verdict} (no test; not among the {tests})"
    return f"{verdict} (p {fmt_p(row['p'])}, Holm {fmt_p(row['holm_p'])} of {tests} tests)"


def pilot_label(seeds: int) -> str:
    """'pilot (3 seeds)': what a pilot row shows in place of a verdict."""
    return f"{PILOT} ({int(seeds)} seed{'' if int(seeds) == 1 else 's'})"


def fmt_p(p: float) -> str:
    return "—" if math.isnan(p) else ("<0.001" if p < 0.001 else f"{p:.3f}")
