"""REPORT.md's gradient-norm clipping section: the share of each cell's updates whose total
gradient norm was clipped, beside the cell's final accuracy, for every cell.

The claim notes name gradient-norm clipping only where two compared cells' shares differ by
5 points or more (analysis/core/grad_clip.py). But where the clip binds on most updates of
both cells, every method's step is cut to the same norm whatever its objective asked, which
damps the differences between methods even when the two shares are equal. So the share is
shown for every cell, with its spread over seeds, next to the accuracies the comparisons read.
"""

from __future__ import annotations

import pandas as pd

from analysis.core import style
from analysis.core.stats import fmt_ci, mean_ci
from analysis.reports.markdown import md_table, order_cells, shown_cols
from analysis.reports.paper_tables import CELL_COLS

INTRO = (
    "The trainer clips each update's total gradient norm at `train.grad_clip`. Where that "
    "binds on most updates, every method's step is cut to the same norm whatever its "
    "objective asked, so differences between methods are damped, and a comparison of two "
    "cells is also a comparison of how often their steps were cut. The claim notes name it "
    "only where two cells' shares differ by 5 points or more; this table gives it for every "
    "cell: the share of updates clipped (mean and 95% t-interval over seeds, and the lowest "
    "and highest seed), beside the final accuracies the comparisons read."
)


def grad_clip_cells(summary: pd.DataFrame, suites: list[str]) -> pd.DataFrame:
    """One row per cell: its grad-norm clipped share over seeds and its final accuracies,
    formatted; empty when no run has a share (no `train.grad_clip`, or no update records)."""
    if "grad_clip_share" not in summary or summary["grad_clip_share"].isna().all():
        return pd.DataFrame()
    cols = [c for c in CELL_COLS if c in summary.columns]
    rows = []
    for key, g in summary.groupby(cols, sort=True):
        share = g["grad_clip_share"].dropna()
        rows.append({**dict(zip(cols, key, strict=True)), "staleness": int(g["staleness"].iat[0]),
                     "grad-norm clipped": fmt_ci(*mean_ci(share), digits=2),
                     "lowest - highest seed": (f"{share.min():.2f} - {share.max():.2f}"
                                               if len(share) else "—"),
                     "final sampled acc": fmt_ci(*mean_ci(g["final_sampled_acc"])),
                     "final greedy acc": fmt_ci(*mean_ci(g["final_greedy_acc"]))})
    table = order_cells(pd.DataFrame(rows), suites)
    table["staleness"] = table["staleness"].map(style.staleness_label)
    return table


def grad_clip_lines(summary: pd.DataFrame, suites: list[str]) -> list[str]:
    """The section; none when no cell has a share."""
    table = grad_clip_cells(summary, suites)
    if table.empty:
        return []
    return ["## Gradient-norm clipping beside the comparisons", "", INTRO, "",
            md_table(shown_cols(table, suites)), ""]
