"""Parameter variants in a lag report: an ablation of one method beside its own runs.

A run of a method with parameters other than its yaml's (`bapo (bapo.low_start=0.8)`,
analysis/core/cells.py) is a variant. Each variant cell is compared, paired by seed, with the
method's own cell at the same lag and anchor and with ppo's there: the first says what the
changed parameter does, the second whether that closes (or opens) the gap to the baseline.
"""

from __future__ import annotations

import pandas as pd

from analysis.claims.lag import REFERENCE
from analysis.core.paired import UP, fmt_paired, paired_difference

# What an ablation of a clipping method changes first: its accuracy and how far its
# policy moves from the behaviour policy.
VARIANT_METRICS = {"final_greedy_acc": "final greedy", "final_sampled_acc": "final sampled",
                   "steady_abs_log_r": "mean abs log r", "steady_clip_frac": "clip frac"}


def variant_table(summary: pd.DataFrame, base_of: dict[str, str]) -> pd.DataFrame:
    """One row per (variant cell, metric): the variant's, its method's and ppo's means over
    seeds, then variant - method and variant - ppo paired by seed. `base_of` maps each
    method label to its method name (a variant's label differs from its name)."""
    rows = []
    variants = sorted(m for m in summary["method"].unique() if base_of.get(m, m) != m)
    for variant in variants:
        own = summary[summary["method"] == variant]
        for (lag, anchor), cell in own.groupby(["lag", "anchor"], sort=False):
            at = summary[(summary["lag"] == lag) & (summary["anchor"] == anchor)]
            plain, ppo = at[at["method"] == base_of[variant]], at[at["method"] == REFERENCE]
            for col, name in VARIANT_METRICS.items():
                if col not in summary:  # e.g. runs without update records
                    continue
                by_seed = {k: g.set_index("seed")[col].astype(float)
                           for k, g in (("variant", cell), ("plain", plain), ("reference", ppo))}
                rows.append({
                    "variant": variant, "lag": lag, "anchor": anchor, "metric": name,
                    "variant mean": round(by_seed["variant"].mean(), 4),
                    "method": base_of[variant],
                    "method mean": round(by_seed["plain"].mean(), 4),
                    f"{REFERENCE} mean": round(by_seed["reference"].mean(), 4),
                    "variant − method": _paired(by_seed["variant"], by_seed["plain"]),
                    f"variant − {REFERENCE}": _paired(by_seed["variant"], by_seed["reference"]),
                })
    return pd.DataFrame(rows)


def _paired(a: pd.Series, b: pd.Series) -> str:
    return fmt_paired(paired_difference(a, b), UP, digits=3) if len(b) else "no runs here"
