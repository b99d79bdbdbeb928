"""One-seed pilots apart from the sweeps: which cells and runs they are, and their section.

A pilot is one seed run to choose a sweep's settings. Beside a sweep's three-seed cells it
reads as a result it is not (no interval, another thread count, sometimes another build),
so no report draws or tabulates it with them:

- a cell with one seed where the other cells of its table have more (the most common seed
  count) is left out of the sweep tables, figures and claims and listed in a section of
  its own (REPORT.md of analysis/make_figures.py per suite, and of analysis/lag_report.py);
- the lag report's calibration pilots (experiments/calibration/runs/L*) come in only when
  asked for (`--pilots`), in a figure of their own, and only those of the report's build.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

LAG_CELL = ["lag", "anchor", "method"]  # a lag report's cell


def one_seed_cells(summary: pd.DataFrame, cell: list[str], within: str | None = None) -> pd.DataFrame:
    """The run rows of the cells (`cell` columns) with one seed where the most common seed
    count of their table (all rows, or each `within` group, e.g. a suite) is more than one;
    empty when every cell is a sweep's (or every cell has one seed)."""
    if summary.empty:
        return summary
    groups = summary.groupby(within, sort=False) if within else [(None, summary)]
    lone = []
    for _, part in groups:
        seeds = part.groupby(cell, sort=False)["seed"].nunique()
        if int(seeds.mode().max()) < 2:
            continue
        ones = seeds[seeds == 1].index
        lone.append(part[part.set_index(cell).index.isin(ones)])
    return pd.concat(lone).reset_index(drop=True) if lone else summary.iloc[0:0]


def apart_lines(apart: pd.DataFrame, cell_table: Callable[[pd.DataFrame], pd.DataFrame],
                md_table: Callable[[pd.DataFrame], str]) -> str:
    """The report's section for the one-seed cells; '' when there are none."""
    if apart.empty:
        return ""
    lines = ["", "## One-seed cells, apart from the sweeps", "",
             "These cells have one seed where the sweeps' have more: no interval, so they are "
             "left out of the tables, figures and claims above.", "",
             md_table(cell_table(apart).astype(object).fillna("—")), ""]
    return "\n".join(lines)
