"""The sections of REPORT.md (analysis/reports/paper.py writes it), each a list of lines."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis.core import style
from analysis.core.builds import build_labels, run_meta
from analysis.core.loader import RunSet
from analysis.core.multiplicity import PILOT
from analysis.reports import random_reward
from analysis.reports.markdown import (
    SEEDS_HEADING,
    SEEDS_RULE,
    by_construction,
    holm_counts,
    md_table,
    order_cells,
    shown_claims,
    shown_cols,
    suite_labels,
    verdict_counts,
)
from analysis.reports.paper_tables import results_markdown, results_table, runs_markdown


@dataclass
class SuiteFigures:
    """Which figures of one suite were drawn, into which dir (relative to REPORT.md)."""

    suite: str
    where: str
    made: list[str]
    skipped: list[tuple[str, str]]


def _shares_shown(table: pd.DataFrame, suites: list[str]) -> pd.DataFrame:
    """A per-cell table of shares, cells in report order, staleness labelled, every column
    after `n` printed to three decimals."""
    shown = order_cells(table, suites)
    shown["staleness"] = shown["staleness"].map(style.staleness_label)
    first = list(shown.columns).index("n") + 1
    for col in shown.columns[first:]:
        shown[col] = shown[col].map(lambda v: f"{v:.3f}")
    return shown


def search_lines(table: pd.DataFrame, suites: list[str]) -> list[str]:
    """The BAPO search-outcome section (analysis/core/search_outcomes.py); none when empty."""
    if table.empty:
        return []
    shown = _shares_shown(table, suites)
    return [
        "## How the BAPO search ended",
        "",
        "Share of update records (all seeds of a cell pooled) by how the bound search ended: "
        "`at start` (rho >= rho0 at the start bounds), `moved, reached`, `not reached` (the "
        "whole grid tried, bounds left at the max), `undefined` (no token with A != 0). `rho "
        "before`/`after`: mean positive contribution before and after the search. Update 0 "
        "of a rollout is on-policy: nothing can be clipped there, so its rho is the batch's "
        "own sign balance.",
        "",
        md_table(shown_cols(shown, suites)),
        "",
    ]


def bound_limit_lines(table: pd.DataFrame, suites: list[str]) -> list[str]:
    """Where BAPO's bounds sat (analysis/core/bound_limits.py): the share of updates at each
    end of the grid, beside the search table's means; none when empty."""
    if table.empty:
        return []
    shown = _shares_shown(table, suites)
    return [
        "## Where BAPO's bounds sat",
        "",
        "Share of update records (all seeds of a cell pooled) whose c_low and c_high equal the "
        "grid's start, equal its maximum, or lie between, and the share inside the paper's "
        "bands (c_low ~0.7, read as 0.65-0.75; c_high 1.9-2.2). The means of c_low and c_high "
        "above (and the claims' 'settles near' rows) average these ends: a mean between the "
        "start and the maximum need not be a value any update used. Updates with no token of "
        "nonzero advantage ran at the start bounds and are counted there. "
        "`fig_bapo_bound_hist` draws the distributions.",
        "",
        md_table(shown_cols(shown, suites)),
        "",
    ]


def apart_lines(apart: pd.DataFrame, suites: list[str]) -> list[str]:
    """The one-seed cells of suites whose other cells have more seeds: apart from the
    sweeps' tables, claims and figures (analysis/core/pilots.py); none when there are none."""
    if apart.empty:
        return []
    return ["## One-seed cells, apart from the sweeps", "",
            "These cells have one seed where the other cells of their suite have more: no "
            "interval, so they are left out of the tables, claims and figures above.", "",
            md_table(runs_markdown(apart, suites)), "",
            md_table(results_markdown(order_cells(results_table(apart), suites), suites)), ""]


def random_reward_lines(runs: RunSet, summary: pd.DataFrame, last_k: int) -> list[str]:
    """The random-reward section (analysis/reports/random_reward.py); none without such runs."""
    if not random_reward.random_suites(runs):
        return []
    table = random_reward.cell_table(runs, summary, last_k)
    return ["## Random-reward experiment", "", random_reward.intro(last_k), "", md_table(table), ""]


VERDICT_RULE = (
    "Every claim states a direction. It is `held` only when its 95% interval lies wholly on "
    "that side (above a threshold, inside a range, or a paired difference that excludes 0 "
    "in the paper's direction), `not held` only when it lies wholly on the other side, and "
    "`not settled` otherwise, whatever the means say; the note gives the reason. `no data`: "
    "the runs it needs are missing. Two cells are compared by their paired difference by "
    "seed (they share seeds): mean ± 95% t half-width over seeds, and how many seeds lie on "
    "the expected side; the unpaired intervals are shown beside it. Rows marked "
    "'staleness > 1' are tested at each level; only the levels the paper ran (1x, 2x, 4x) "
    "decide, 8x is shown. Notes name gradient-norm clipping where its share differs by 5 "
    "points or more between the compared cells. Seeds that all gave the same value have no "
    "interval (no spread), so such a row is `not settled`. `after Holm`: each table's rows "
    "are many tests at once, so each row also gets the verdict that survives Holm's "
    "correction over the table's tested rows (its two-sided t-test p, the Holm-adjusted p, "
    "and how many tests the table holds); a settled verdict whose adjusted p is not below "
    "0.05 becomes `not settled`. Each row is judged against the paper's value declared with "
    "it (analysis/claims/paper.py): a range as the paper gives it, `~x` as [x - 0.05, x + "
    "0.05], a comparison as the direction of a paired difference. A row that holds by "
    "construction (its note says why) is shown with its verdict but is no evidence: it is "
    "neither counted nor among Holm's tests. docs/statistics.md has the details. " + SEEDS_RULE
)


def summary_lines(claims: pd.DataFrame, suites: list[str]) -> list[str]:
    """One screen: every claim of the largest suite (the paper grid) with the paper's
    number, ours and the verdict; for the other suites their counts and settled claims."""
    if claims.empty:
        return []
    labels = suite_labels(suites)
    main = claims[claims["suite"] == suites[0]]
    shown = shown_claims(main)
    table = shown[["claim", "paper", "basis", "verdict"]].rename(columns={"basis": "ours"})
    table["after Holm"] = main["holm_verdict"].where(~by_construction(main), "by construction")
    table["after Holm"] = table["after Holm"].where(main["holm_verdict"] != PILOT,
                                                    shown["verdict"])
    table[SEEDS_HEADING] = shown[SEEDS_HEADING]
    lines = ["## Summary", "", VERDICT_RULE, ""]
    if len(suites) > 1:
        lines += [f"Suite {labels[suites[0]]} (the suites table below names S1..S{len(suites)}): "
                  f"{verdict_counts(main)}. {holm_counts(main)} `ours` is the interval the "
                  "verdict rests on.", ""]
    lines += [md_table(table), ""]
    for suite in suites[1:]:
        part = claims[claims["suite"] == suite]
        settled = part[part["verdict"].isin(["held", "not held"]) & ~by_construction(part)]
        lines += [f"Suite {labels[suite]}: {verdict_counts(part)}. {holm_counts(part)}"
                  + ("" if settled.empty else " Settled: " + "; ".join(
                      f"{c} ({b}): {v}, after Holm {h}" for c, b, v, h in
                      settled[["claim", "basis", "verdict", "holm_verdict"]]
                      .itertuples(index=False)) + "."), ""]
    return lines


def suites_lines(runs: RunSet, claims: pd.DataFrame, suites: list[str]) -> list[str]:
    """The one place the short suite labels are defined."""
    if len(suites) <= 1:
        return []
    rows = [{"label": label, "suite": suite,
             "runs": sum(r.suite == suite for r in runs.runs),
             "claims": verdict_counts(claims[claims["suite"] == suite])}
            for suite, label in suite_labels(suites).items()]
    return [
        "## Suites",
        "",
        f"The runs form {len(suites)} suites (analysis/core/cells.py: cells that differ only in "
        "method, staleness and experiment name can be compared); each has its own figures "
        "and claims. The tables below name a suite by its label. `runs.csv` maps every run "
        "dir (also the `overrides-<hash>/` ones) to its suite, cell, seed and overrides.",
        "",
        md_table(pd.DataFrame(rows)),
        "",
    ]


def claims_lines(claims: pd.DataFrame, suites: list[str]) -> list[str]:
    lines = ["## Paper claims", "", VERDICT_RULE, ""]
    cols = ["claim", "paper", "measured", "experiments", "criterion", "verdict", "after Holm",
            SEEDS_HEADING, "note"]
    labels = suite_labels(suites)
    for suite in suites:
        part = claims[claims["suite"] == suite]
        if len(suites) > 1:
            lines += [f"### {labels[suite]}", ""]
        lines += [f"Verdicts: {verdict_counts(part)}.", "", holm_counts(part), ""]
        if (part["verdict"] == "no data").all():
            lines += ["No claim has the runs it needs in this suite.", ""]
            continue
        shown = shown_claims(part)
        lines += [md_table(shown[cols]), ""]
    return lines


def figure_lines(runs: RunSet, figures: list[SuiteFigures]) -> list[str]:
    lines = ["## Figures", "", *sampling_lines(runs)]
    for f in figures:
        if len(figures) > 1:
            lines += [f"Suite {f.suite}: in `{f.where}`", ""]
        lines += [f"- made `{n}`" for n in f.made]
        lines += [f"- skipped `{n}`: {why}" for n, why in f.skipped]
        lines += [""]
    return lines


def sampling_lines(runs: RunSet) -> list[str]:
    """Says which token-level numbers come from a sample of responses, if any do."""
    fractions = sorted({r.token_sample_fraction for r in runs.runs if r.token_sample_fraction})
    if not fractions:
        return []
    sampled = sum(r.token_sample_fraction is not None for r in runs.runs)
    shares = ", ".join(f"{f:g}" for f in fractions)
    return [
        f"Token rows of {sampled} of {len(runs.runs)} runs are a seeded sample of whole "
        f"responses (share kept: {shares}; meta.json `export`). Figures and numbers drawn "
        "from token rows (Fig 5, Fig 10, the entropy-quadrant and IS-weight figures) "
        "are estimates from that sample; everything from metrics.jsonl is exact.",
        "",
    ]


def numerics_mode(run) -> str:
    meta = run_meta(run)
    if not meta:
        return "unknown (no meta.json)"
    numerics = meta.get("numerics")
    return numerics.get("mode", "?") if isinstance(numerics, dict) else "native (made before the mode)"


def build_lines(runs: RunSet) -> list[str]:
    """Which warm-start build and numerics mode the runs come from, with counts: a reader
    compares numbers only within one build (another build starts from other weights)."""
    labels = build_labels(runs)
    counts: dict[tuple[str, str], int] = {}
    for r in runs.runs:
        key = (labels.get(r.run_id) or "unknown (no digest, no step-0 eval)", numerics_mode(r))
        counts[key] = counts.get(key, 0) + 1
    parts = [f"warm start {label}, numerics {mode}: {n} runs" for (label, mode), n in sorted(counts.items())]
    note = "" if len(counts) == 1 else " Several builds: compare runs only within one."
    return [f"**Build:** {'; '.join(parts)}.{note}", ""]
