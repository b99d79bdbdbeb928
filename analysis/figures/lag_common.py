"""What the lag sweeps' figures share (analysis/lag_report.py draws them): the order and
colours of lags, and the data each figure reads from a RunSet, derived once per RunSet.

The figures compare the lag rows' reference method (analysis/claims/lag.py `REFERENCE`, the
paper's baseline) across lags, and every other method against it; which runs search their
bounds they read from the runs' method traits.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from analysis.claims.lag import REFERENCE
from analysis.core.final import FINAL_EVALS
from analysis.core.lags import coupled_with_lag, lag_summary, searching_updates, steady_updates
from analysis.core.runs import RunSet
from src.run_vocab import RATIO_BIN_EDGES

__all__ = ["FINAL_EVALS", "REFERENCE"]

BIN_LABELS = ["≤0.2", *[f"{a:g}-{b:g}" for a, b in zip(RATIO_BIN_EDGES, RATIO_BIN_EDGES[1:], strict=False)],
              f">{RATIO_BIN_EDGES[-1]:g}"]


def lag_order(labels: pd.Series, low: pd.Series) -> list[str]:
    """Lag labels by their low end; on a tie the narrower first (on-policy "0" before the
    paper's "0-3")."""
    d = pd.DataFrame({"l": labels, "o": low}).drop_duplicates("l")
    return list(d.assign(w=d["l"].str.len()).sort_values(["o", "w"])["l"])


def lag_palette(order: list[str]) -> dict[str, tuple]:
    cmap = plt.get_cmap("viridis")
    return {lag: cmap(i / max(len(order) - 1, 1) * 0.9) for i, lag in enumerate(order)}


def summary(runs: RunSet) -> pd.DataFrame:
    """The lag summary of `runs` (analysis/core/lags.py), computed once per RunSet."""
    return runs.cached("lag_summary", lambda: lag_summary(runs))


def reference_steps(runs: RunSet) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Step records and lags of the reference method's coupled runs with a config lag."""
    return runs.cached("reference_steps", lambda: coupled_with_lag(runs, REFERENCE))


def reference_updates(runs: RunSet) -> pd.DataFrame:
    """Steady update records of those runs."""
    def make() -> pd.DataFrame:
        ids = set(reference_steps(runs)[1]["run_id"])
        return steady_updates(runs.subset(lambda r: r.run_id in ids))
    return runs.cached("reference_updates", make)


def search_updates(runs: RunSet) -> pd.DataFrame:
    """Steady updates of the runs whose method searches its bounds, annotated."""
    return runs.cached("search_updates", lambda: searching_updates(runs))
