"""figures/REPORT.md: results per method and staleness, and the paper's claims checked.

Every number is computed here from the run dirs; nothing is typed in except the paper's
own numbers (analysis/claims/paper.py, docs/methods.md) that the measurements are compared
with. The sections are analysis/reports/paper_sections.py's, the tables paper_tables.py's.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from analysis.claims import verdicts
from analysis.claims.batch import BatchControl, batch_claims, controls_present
from analysis.claims.paper import claims_table
from analysis.claims.random_reward import random_suites, suite_claims
from analysis.core.bound_limits import bound_limit_table
from analysis.core.final import FINAL_EVALS
from analysis.core.loader import RunSet
from analysis.core.pilots import one_seed_cells
from analysis.core.search_outcomes import search_outcomes
from analysis.reports.claim_counts import claim_counts
from analysis.reports.grad_clip_section import grad_clip_lines
from analysis.reports.markdown import (
    SEEDS_HEADING,
    holm_counts,
    md_table,
    order_cells,
    shown_claims,
    suite_labels,
    verdict_counts,
)
from analysis.reports.paper_sections import (
    SuiteFigures,
    apart_lines,
    bound_limit_lines,
    build_lines,
    claims_lines,
    figure_lines,
    random_reward_lines,
    search_lines,
    suites_lines,
    summary_lines,
)
from analysis.reports.paper_tables import (
    CELL_COLS,
    learning_table,
    results_markdown,
    results_table,
    runs_markdown,
)
from analysis.reports.run_index import run_index

__all__ = ["CELL_COLS", "SuiteFigures", "write_report"]


def suite_tables(runs: RunSet, summary: pd.DataFrame, last_k: int) -> pd.DataFrame:
    """Every suite's claim table, one after another; Holm's correction runs over one suite's
    table: the rows read and judged together."""
    coin_flips = set(random_suites(runs))
    claims = pd.concat(
        [verdicts.table(suite_claims(runs, suite, last_k) if suite in coin_flips
                        else claims_table(summary[summary["suite"] == suite], runs=runs)).assign(
                            suite=suite)
         for suite in runs.suites],
        ignore_index=True,
    )
    return claims[["suite", *[c for c in claims.columns if c != "suite"]]]


def _write_csvs(out: Path, runs: RunSet, results: pd.DataFrame, claims: pd.DataFrame,
                search: pd.DataFrame) -> None:
    out.mkdir(parents=True, exist_ok=True)
    results.to_csv(out / "results.csv", index=False)
    claims.to_csv(out / "claims.csv", index=False)
    if not search.empty:
        search.to_csv(out / "bapo_search.csv", index=False)
    labels = suite_labels(runs.suites)
    claim_counts(claims, labels).to_csv(out / "claim_counts.csv", index=False)
    run_index(runs, labels).to_csv(out / "runs.csv", index=False)


def _intro(runs: RunSet, roots: Iterable[str]) -> list[str]:
    return [
        "# Reproduction report", "",
        f"Made by `analysis/make_figures.py` from {len(runs.runs)} runs under "
        + ", ".join(f"`{r}`" for r in roots)
        + ". Every number is computed from the run dirs. A cell is one experiment, one method "
        "and one value of every config key that changes the numbers; only its seeds are "
        "pooled. `±` is the half-width of a 95% Student-t interval over seeds; `n` is the "
        "number of seeds.", "",
    ]


def _results_lines(results: pd.DataFrame, suites: list[str], last_k: int) -> list[str]:
    return [
        "## Results", "",
        f"final accuracy: mean of each run's last {FINAL_EVALS} evals after step 0 (the runs "
        "table gives their steps; cells compared in a claim have theirs at the same optimizer "
        "updates, or the claim's note says how they are aligned). final reward: mean `reward_mean` of the last "
        f"{last_k} steps. entropy drift: mean `entropy_mean` of the last {last_k} steps minus "
        f"the first {last_k} (negative: entropy fell; the report's one entropy convention); in a "
        "suite whose levels run one update budget in different step counts, each end holds "
        f"the same optimizer updates at every level: {last_k} steps of the stalest level, k "
        "times as many at a level with k times fewer updates per step. "
        "grad-norm clipped: share of updates whose total gradient norm exceeded "
        "`train.grad_clip` and was clipped (a confound wherever it differs between cells). "
        "clip fractions, rho, c_low, c_high: mean over all steps (rho of "
        "bapo-objective runs only; fixed-clip methods show their fixed bounds).", "",
        md_table(results_markdown(results, suites)) if len(results) else "no runs", "",
    ]


def _learning_lines(runs: RunSet, summary: pd.DataFrame, suites: list[str]) -> list[str]:
    """Whether each cell learns: none for suites of coin-flip rewards (nothing to learn)."""
    coin_flips = set(random_suites(runs))
    table = learning_table(summary[~summary["suite"].isin(coin_flips)], suites)
    if table.empty or len(table.columns) <= 3:
        return []
    return ["## Learning: final accuracy minus the warm start", "",
            "Per run, final accuracy (the mean of its last evals, as above) minus its own eval "
            "at step 0, before any update; mean ± 95% Student-t half-width over seeds, and the "
            "seeds above 0. A cell whose interval reaches 0 has not been shown to learn: "
            "comparisons of such cells say how methods lose, not what they gain, and their "
            "claim rows say so in their notes.", "", md_table(table), ""]


def _batch_lines(summary: pd.DataFrame) -> tuple[list[str], pd.DataFrame]:
    """The section of the 1x control at the 4x update size (analysis/claims/batch.py), its
    own table for Holm; none where none of its cells is here."""
    claims = batch_claims(summary)
    if claims.empty:
        return [], claims
    claims = verdicts.table(claims)
    shown = shown_claims(claims)[["claim", "paper", "measured", "criterion", "verdict",
                                  "after Holm", SEEDS_HEADING, "note"]]
    return ["## Staleness against data and batch size", "",
            *[_batch_intro(c) for c in controls_present(summary)],
            f"Verdicts: {verdict_counts(claims)}.", "", holm_counts(claims), "",
            md_table(shown), ""], claims


def _batch_intro(c: BatchControl) -> str:
    size = c.size
    return (f"The grid's 4x - 1x compares at equal updates, but 1x trains on {c.full} responses "
            f"per update and 4x on mini-batches of {size} of a quarter as many rollouts. The 1x "
            f"control at the 4x update size ({c.experiment}: {size} responses per update, a "
            "fresh rollout each update, 120 updates) separates the two: 4x - "
            f"{c.control} is the cost of staleness at equal update size and data, {c.control} "
            "- 1x the cost of the smaller batch and data. Paired by seed; primary metric "
            f"{c.metric_name}, as the control's sweep declared before its runs.\n")


def write_report(
    runs: RunSet,
    summary: pd.DataFrame,
    out: Path,
    roots: Iterable[str],
    figures: list[SuiteFigures],
    last_k: int,
) -> tuple[Path, pd.DataFrame, pd.DataFrame]:
    suites = runs.suites
    apart = one_seed_cells(summary, CELL_COLS, within="suite")  # pilots: listed apart
    summary = summary[~summary["run_id"].isin(apart["run_id"])]
    results = order_cells(results_table(summary), suites)
    claims = suite_tables(runs, summary, last_k)
    search = search_outcomes(runs)
    search = order_cells(search, suites) if not search.empty else search
    batch, batch_table = _batch_lines(summary)
    _write_csvs(out, runs, results, claims, search)
    if not batch_table.empty:
        batch_table.to_csv(out / "batch_claims.csv", index=False)
    text = [
        *_intro(runs, roots), *build_lines(runs), *summary_lines(claims, suites),
        *suites_lines(runs, claims, suites),
        "## Runs (one row per cell)", "", md_table(runs_markdown(summary, suites)), "",
        *_results_lines(results, suites, last_k), *_learning_lines(runs, summary, suites),
        *batch,
        *apart_lines(apart, suites), *random_reward_lines(runs, summary, last_k),
        *grad_clip_lines(summary, suites), *claims_lines(claims, suites), *search_lines(search, suites),
        *bound_limit_lines(bound_limit_table(runs), suites), *figure_lines(runs, figures),
        "## Data problems", "", *([f"- {m}" for m in runs.messages] or ["none"]), "",
    ]
    path = out / "REPORT.md"
    path.write_text("\n".join(text))
    return path, results, claims
