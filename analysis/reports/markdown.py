"""Markdown of the reports: tables, verdict counts, and the order and labels of cells and
suites that every table shares."""

from __future__ import annotations

import math

import pandas as pd

from analysis.claims.distance import COLUMN as SEEDS_NEEDED
from analysis.claims.distance import HEADING as SEEDS_HEADING
from analysis.claims.rules import VERDICTS
from analysis.core import style
from analysis.core.cells import experiment_order
from analysis.core.multiplicity import PILOT, fmt_holm, pilot_label

# What every claims section says of pilots and of the seeds-needed column.
SEEDS_RULE = (
    "A row on fewer than 8 seeds is a pilot: no verdict (`pilot (n seeds)`), its numbers "
    "shown, and not among Holm's tests. `seeds needed`: for a paired comparison `not "
    "settled` after Holm, the seeds a two-sided paired t-test would need to detect the "
    "paper's effect (its value as a difference, where the claim declares one; else `no paper "
    "value`) at the measured paired sd with 80% power, at the level of the row's Holm step "
    "(a pilot's: 0.05 over the table's tests and pilots); in brackets the same at the ends of "
    "the sd's 95% chi-square interval over the row's seeds: an order of magnitude, not a "
    "promise (docs/statistics.md)."
)


def by_construction(claims: pd.DataFrame) -> pd.Series:
    """Which rows hold by construction (shown, not counted as evidence)."""
    if "by_construction" not in claims:
        return pd.Series(False, index=claims.index)
    return claims["by_construction"].fillna("").astype(str) != ""


def verdict_counts(claims: pd.DataFrame, column: str = "verdict") -> str:
    """'6 held, 2 not held, 7 not settled' (the kinds present, in VERDICTS order), over the
    rows that are evidence; '; 2 by construction (shown, not counted)' after them."""
    built = by_construction(claims)
    counts = claims.loc[~built, column].value_counts()
    text = ", ".join(f"{counts[v]} {v}" for v in VERDICTS if v in counts) or "no claims"
    return text + (f"; {int(built.sum())} by construction (shown, not counted)"
                   if built.any() else "")


def shown_claims(claims: pd.DataFrame) -> pd.DataFrame:
    """A claims table as REPORT.md shows it: `after Holm` in words, a pilot's seeds in its
    verdict, the seeds an unsettled row would need (SEEDS_HEADING), and a row that holds
    by construction marked so in its verdict and explained in its note."""
    built = by_construction(claims)
    why = claims["by_construction"] if "by_construction" in claims else pd.Series("", claims.index)
    out = claims.assign(**{"after Holm": claims.apply(fmt_holm, axis=1),
                           SEEDS_HEADING: claims[SEEDS_NEEDED]})
    out["verdict"] = [f"{v} (by construction)" if b else pilot_label(n) if v == PILOT else v
                      for v, b, n in zip(out["verdict"], built, out["seeds"], strict=True)]
    out["note"] = [f"holds by construction, not counted: {w}" + (f"; {n}" if n else "")
                   if b else n for b, w, n in zip(built, why, out["note"], strict=True)]
    return out


def holm_counts(claims: pd.DataFrame) -> str:
    """The line under the raw counts: the same claims after Holm's correction over the
    table's tested rows (analysis/core/multiplicity.py)."""
    tests = int(claims["tests"].iat[0]) if len(claims) else 0
    return (f"After Holm's correction over the {tests} tested rows: "
            f"{verdict_counts(claims, 'holm_verdict')}.")


def between_markers(text: str, start: str, end: str, body: str, what: str) -> str:
    """`text` with what lies between its `start` and `end` lines replaced by `body`; an error
    naming the markers (and `what` they hold) when it has not exactly one of each."""
    if text.count(start) != 1 or text.count(end) != 1:
        raise ValueError(f"the README needs one {start} line and one {end} line around its {what}")
    head, rest = text.split(start + "\n", 1)
    _, tail = rest.split(end, 1)
    return head + start + "\n" + body + end + tail


def fmt_effect(x: float | None, digits: int = 4) -> str:
    """A signed effect: 4 significant digits below 0.01 ('-0.004216'), else 4 decimals
    ('+0.0187'); '-' for none."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:+.{digits}g}" if abs(x) < 1e-2 and x != 0 else f"{x:+.{digits}f}"


def fmt_interval(mean: float, low: float, high: float) -> str:
    """'-0.004216 [-0.00822, -0.001193]': an effect and its interval, each by fmt_effect."""
    return f"{fmt_effect(mean)} [{fmt_effect(low)}, {fmt_effect(high)}]"


def md_table(df: pd.DataFrame) -> str:
    cells = df.astype(str).map(lambda v: v.replace("|", "\\|").replace("\n", " "))
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(row) + " |" for row in cells.itertuples(index=False)]
    return "\n".join(lines)


def order_cells(df: pd.DataFrame, suites: list[str]) -> pd.DataFrame:
    """Rows by suite (largest first), experiment (by staleness), then the canonical method
    order: within one experiment the methods compared side by side."""
    rank = {m: i for i, m in enumerate(style.method_order(df["method"].unique()))}
    exps = experiment_order(set(zip(df["experiment"], df["staleness"], strict=True)))
    keys = {
        "suite": lambda c: c.map({x: i for i, x in enumerate(suites)}),
        "experiment": lambda c: c.map({x: i for i, x in enumerate(exps)}),
        "method": lambda c: c.map(rank),
    }
    by = [c for c in ("suite", "experiment", "method") if c in df.columns]
    return df.sort_values(by, key=lambda c: keys[c.name](c), kind="stable").reset_index(drop=True)


def suite_labels(suites: list[str]) -> dict[str, str]:
    """Short labels S1, S2, ... for the suites (largest first), defined once in REPORT.md's
    suite table and used in every other table."""
    return {s: f"S{i + 1}" for i, s in enumerate(suites)}


def shown_cols(df: pd.DataFrame, suites: list[str]) -> pd.DataFrame:
    """The suite column, by its short label, only when there is more than one suite."""
    if len(suites) <= 1:
        return df.drop(columns=["suite"], errors="ignore")
    return df.assign(suite=df["suite"].map(suite_labels(suites))) if "suite" in df else df
