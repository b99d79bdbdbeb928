"""figures/REPORT.md: results per method and staleness, and the paper's claims checked.

Every number is computed here from the run dirs; nothing is typed in except the paper's
own numbers (docs/methods.md) that the measurements are compared with.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.claims.paper import claims_table
from analysis.core import style
from analysis.core.builds import build_labels, run_meta
from analysis.core.final import FINAL_EVALS
from analysis.core.loader import RunSet
from analysis.core.multiplicity import fmt_holm, with_holm
from analysis.core.pilots import one_seed_cells
from analysis.core.search_outcomes import search_outcomes
from analysis.core.stats import fmt_ci, mean_ci
from analysis.reports import random_reward
from analysis.reports.claim_counts import claim_counts
from analysis.reports.markdown import (
    holm_counts,
    md_table,
    order_cells,
    shown_cols,
    suite_labels,
    verdict_counts,
)
from analysis.reports.run_index import run_index

RESULT_COLUMNS = {
    "final_sampled_acc": "final sampled acc",
    "final_greedy_acc": "final greedy acc",
    "final_reward": "final reward",
    "entropy_drift": "entropy drift",
    "grad_clip_share": "grad-norm clipped",
    "clip_frac": "clip frac",
    "clip_low_frac": "clip low frac",
    "clip_high_frac": "clip high frac",
    "rho": "rho (bapo)",
    "c_low": "c_low",
    "c_high": "c_high",
}


CELL_COLS = ["suite", "experiment", "method", "staleness"]


def results_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Long frame: one row per cell (suite, experiment, method, staleness) and metric ->
    mean, ci_low, ci_high, n over seeds. Only seeds of one cell are ever pooled here."""
    rows = []
    cols = [c for c in CELL_COLS if c in summary.columns]
    for key, g in summary.groupby(cols, sort=True):
        for col in RESULT_COLUMNS:
            m, lo, hi, n = mean_ci(g[col]) if col in g else (math.nan, math.nan, math.nan, 0)
            rows.append(
                {**dict(zip(cols, key, strict=True)), "staleness": int(g["staleness"].iat[0]),
                 "metric": col, "mean": m, "ci_low": lo, "ci_high": hi, "n": n}
            )
    return pd.DataFrame(rows, columns=[*cols, "metric", "mean", "ci_low", "ci_high", "n"])


def results_markdown(results: pd.DataFrame, suites: list[str]) -> pd.DataFrame:
    """Wide table of formatted 'mean ± half-width (n)' cells, one row per cell."""
    r = results.assign(
        cell=[
            fmt_ci(m, lo, hi, n)
            for m, lo, hi, n in results[["mean", "ci_low", "ci_high", "n"]].itertuples(index=False)
        ]
    )
    wide = r.pivot(index=CELL_COLS, columns="metric", values="cell")
    wide = wide[[c for c in RESULT_COLUMNS if c in wide.columns]].rename(columns=RESULT_COLUMNS)
    wide = order_cells(wide.reset_index(), suites)
    wide["staleness"] = wide["staleness"].map(style.staleness_label)
    return shown_cols(wide, suites)


def runs_markdown(summary: pd.DataFrame, suites: list[str]) -> pd.DataFrame:
    """One row per cell: how many seeds (which) and steps it has."""
    rows = []
    for key, g in summary.groupby(CELL_COLS, sort=False):
        seeds = sorted(g["seed"].astype(int))
        steps = sorted(set(g["steps_used"].astype(int)))
        finals = sorted(set(g["final_eval_steps"].dropna())) if "final_eval_steps" in g else []
        rows.append({**dict(zip(CELL_COLS, key, strict=True)),
                     "seeds": f"{len(seeds)} ({', '.join(map(str, seeds))})",
                     "steps": "/".join(map(str, steps)),
                     "final evals at steps": "; ".join(finals) or "—"})
    table = order_cells(pd.DataFrame(rows, columns=[*CELL_COLS, "seeds", "steps",
                                                    "final evals at steps"]), suites)
    table["staleness"] = table["staleness"].map(style.staleness_label)
    return shown_cols(table, suites)


@dataclass
class SuiteFigures:
    """Which figures of one suite were drawn, into which dir (relative to REPORT.md)."""

    suite: str
    where: str
    made: list[str]
    skipped: list[tuple[str, str]]


def _search_lines(table: pd.DataFrame, suites: list[str]) -> list[str]:
    """The BAPO search-outcome section (analysis/core/search_outcomes.py); none when empty."""
    if table.empty:
        return []
    shown = order_cells(table, suites)
    shown["staleness"] = shown["staleness"].map(style.staleness_label)
    first = list(shown.columns).index("n") + 1
    for col in shown.columns[first:]:
        shown[col] = shown[col].map(lambda v: f"{v:.3f}")
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


def _apart_lines(apart: pd.DataFrame, suites: list[str]) -> list[str]:
    """The one-seed cells of suites whose other cells have more seeds: apart from the
    sweeps' tables, claims and figures (analysis/core/pilots.py); none when there are none."""
    if apart.empty:
        return []
    return ["## One-seed cells, apart from the sweeps", "",
            "These cells have one seed where the other cells of their suite have more: no "
            "interval, so they are left out of the tables, claims and figures above.", "",
            md_table(runs_markdown(apart, suites)), "",
            md_table(results_markdown(order_cells(results_table(apart), suites), suites)), ""]


def _random_reward_lines(runs: RunSet, summary: pd.DataFrame, last_k: int) -> list[str]:
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
    "0.05 becomes `not settled`. docs/statistics.md has the details."
)


def _summary_lines(claims: pd.DataFrame, suites: list[str]) -> list[str]:
    """One screen: every claim of the largest suite (the paper grid) with the paper's
    number, ours and the verdict; for the other suites their counts and settled claims."""
    if claims.empty:
        return []
    labels = suite_labels(suites)
    main = claims[claims["suite"] == suites[0]]
    table = main[["claim", "paper", "basis", "verdict"]].rename(columns={"basis": "ours"})
    table["after Holm"] = main["holm_verdict"]
    lines = ["## Summary", "", VERDICT_RULE, ""]
    if len(suites) > 1:
        lines += [f"Suite {labels[suites[0]]} (the suites table below names S1..S{len(suites)}): "
                  f"{verdict_counts(main)}. {holm_counts(main)} `ours` is the interval the "
                  "verdict rests on.", ""]
    lines += [md_table(table), ""]
    for suite in suites[1:]:
        part = claims[claims["suite"] == suite]
        settled = part[part["verdict"].isin(["held", "not held"])]
        lines += [f"Suite {labels[suite]}: {verdict_counts(part)}. {holm_counts(part)}"
                  + ("" if settled.empty else " Settled: " + "; ".join(
                      f"{c} ({b}): {v}, after Holm {h}" for c, b, v, h in
                      settled[["claim", "basis", "verdict", "holm_verdict"]]
                      .itertuples(index=False)) + "."), ""]
    return lines


def _suites_lines(runs: RunSet, claims: pd.DataFrame, suites: list[str]) -> list[str]:
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


def _claims_lines(claims: pd.DataFrame, suites: list[str]) -> list[str]:
    lines = ["## Paper claims", "", VERDICT_RULE, ""]
    cols = ["claim", "paper", "measured", "experiments", "criterion", "verdict", "after Holm",
            "note"]
    labels = suite_labels(suites)
    for suite in suites:
        part = claims[claims["suite"] == suite]
        if len(suites) > 1:
            lines += [f"### {labels[suite]}", ""]
        lines += [f"Verdicts: {verdict_counts(part)}.", "", holm_counts(part), ""]
        if (part["verdict"] == "no data").all():
            lines += ["No claim has the runs it needs in this suite.", ""]
            continue
        shown = part.assign(**{"after Holm": part.apply(fmt_holm, axis=1)})
        lines += [md_table(shown[cols]), ""]
    return lines


def _figure_lines(runs: RunSet, figures: list[SuiteFigures]) -> list[str]:
    lines = ["## Figures", "", *_sampling_lines(runs)]
    for f in figures:
        if len(figures) > 1:
            lines += [f"Suite {f.suite}: in `{f.where}`", ""]
        lines += [f"- made `{n}`" for n in f.made]
        lines += [f"- skipped `{n}`: {why}" for n, why in f.skipped]
        lines += [""]
    return lines


def _sampling_lines(runs: RunSet) -> list[str]:
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


def _numerics_mode(run) -> str:
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
        key = (labels.get(r.run_id) or "unknown (no digest, no step-0 eval)", _numerics_mode(r))
        counts[key] = counts.get(key, 0) + 1
    parts = [f"warm start {label}, numerics {mode}: {n} runs" for (label, mode), n in sorted(counts.items())]
    note = "" if len(counts) == 1 else " Several builds: compare runs only within one."
    return [f"**Build:** {'; '.join(parts)}.{note}", ""]


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
    coin_flips = set(random_reward.random_suites(runs))
    # Holm's correction runs over one suite's table: the rows read and judged together
    claims = pd.concat(
        [with_holm(random_reward.suite_claims(runs, suite, last_k) if suite in coin_flips
                   else claims_table(summary[summary["suite"] == suite])).assign(suite=suite)
         for suite in suites],
        ignore_index=True,
    )
    claims = claims[["suite", *[c for c in claims.columns if c != "suite"]]]
    out.mkdir(parents=True, exist_ok=True)
    results.to_csv(out / "results.csv", index=False)
    claims.to_csv(out / "claims.csv", index=False)
    search = search_outcomes(runs)
    if not search.empty:
        search = order_cells(search, suites)
        search.to_csv(out / "bapo_search.csv", index=False)
    labels = suite_labels(suites)
    claim_counts(claims, labels).to_csv(out / "claim_counts.csv", index=False)
    run_index(runs, labels).to_csv(out / "runs.csv", index=False)
    text = [
        "# Reproduction report",
        "",
        f"Made by `analysis/make_figures.py` from {len(runs.runs)} runs under "
        + ", ".join(f"`{r}`" for r in roots)
        + ". Every number is computed from the run dirs. A cell is one experiment, one method "
        "and one value of every config key that changes the numbers; only its seeds are "
        "pooled. `±` is the half-width of a 95% Student-t interval over seeds; `n` is the "
        "number of seeds.",
        "",
        *build_lines(runs),
        *_summary_lines(claims, suites),
        *_suites_lines(runs, claims, suites),
        "## Runs (one row per cell)",
        "",
        md_table(runs_markdown(summary, suites)),
        "",
        "## Results",
        "",
        f"final accuracy: mean of each run's last {FINAL_EVALS} evals after step 0 (the runs "
        "table gives their steps; cells compared in a claim have theirs at the same optimizer "
        "updates, or the claim's note says how they are aligned). final reward: mean `reward_mean` of the last "
        f"{last_k} steps. entropy drift: mean `entropy_mean` of the last {last_k} steps minus "
        f"the first {last_k} (negative: entropy fell; the report's one entropy convention). "
        "grad-norm clipped: share of updates whose total gradient norm exceeded "
        "`train.grad_clip` and was clipped (a confound wherever it differs between cells). "
        "clip fractions, rho, c_low, c_high: mean over all steps (rho of "
        "bapo-objective runs only; fixed-clip methods show their fixed bounds).",
        "",
        md_table(results_markdown(results, suites)) if len(results) else "no runs",
        "",
        *_apart_lines(apart, suites),
        *_random_reward_lines(runs, summary, last_k),
        *_claims_lines(claims, suites),
        *_search_lines(search, suites),
        *_figure_lines(runs, figures),
        "## Data problems",
        "",
        *([f"- {m}" for m in runs.messages] or ["none"]),
        "",
    ]
    path = out / "REPORT.md"
    path.write_text("\n".join(text))
    return path, results, claims
