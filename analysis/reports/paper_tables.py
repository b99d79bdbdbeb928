"""The tables of REPORT.md: per-cell results over seeds, and the runs of each cell."""

from __future__ import annotations

import math

import pandas as pd

from analysis.core import style
from analysis.core.stats import fmt_ci, mean_ci
from analysis.reports.markdown import (
    order_cells,
    shown_cols,
)

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


def learning_table(summary: pd.DataFrame, suites: list[str]) -> pd.DataFrame:
    """One row per cell: each accuracy's final minus the run's step-0 eval (the warm start),
    mean ± 95% t half-width over seeds and the seeds above 0: does the cell learn at all?"""
    rows = []
    for key, g in summary.groupby(CELL_COLS, sort=False):
        row = dict(zip(CELL_COLS, key, strict=True))
        for col, word in (("gain_sampled_acc", "sampled"), ("gain_greedy_acc", "greedy")):
            if col in g:
                gain = g[col].dropna()
                m, lo, hi, n = mean_ci(gain)
                text = fmt_ci(m, lo, hi, n)
                row[f"{word}: final − step 0"] = (f"{'+' if m >= 0 else ''}{text} "
                                                  f"({int((gain > 0).sum())} of {len(gain)} > 0)")
        rows.append(row)
    if not rows:
        return pd.DataFrame()
    table = order_cells(pd.DataFrame(rows), suites)
    table["staleness"] = table["staleness"].map(style.staleness_label)
    return shown_cols(table, suites)
