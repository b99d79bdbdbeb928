"""The named quantities a claim row reads from a cell's runs, one number per run (by seed).

A row names its quantity (schema.Side.quantity): a column of the run summary
(analysis/core/summary.py, core/lags.py: `final_sampled_acc`, `clip_frac`, `entropy_drift`,
...) or one of the functions below, which derive a number from such columns. Each returns
the cell's values indexed by seed, so two cells' values pair by seed.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd


def by_seed(cell: pd.DataFrame, col: str) -> pd.Series:
    """One cell's `col` indexed by seed: what paired comparisons match on."""
    if col not in cell.columns:
        return pd.Series(dtype=float)
    return cell.set_index("seed")[col].astype(float)


def negative_contribution(cell: pd.DataFrame) -> pd.Series:
    """The negative tokens' share of the loss contribution (gradient reading): the
    complement of `pos_contrib`, since only tokens with A != 0 carry any."""
    return 1.0 - by_seed(cell, "pos_contrib")


QUANTITIES: dict[str, Callable[[pd.DataFrame], pd.Series]] = {
    "negative_contribution": negative_contribution,
}


def values(cell: pd.DataFrame, quantity: str) -> pd.Series:
    """The cell's `quantity` by seed: a named function above, else a summary column."""
    fn = QUANTITIES.get(quantity)
    return fn(cell) if fn else by_seed(cell, quantity)
