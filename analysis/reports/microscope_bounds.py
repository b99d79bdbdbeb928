"""An adaptive rule against its fixed reference, split by where the rule's bounds sat at each
state.

E3.entropy's expectation, written before the study ran, has a clause its pooled row cannot
judge: bapo - ppo on the entropy is "below 0 where the bounds stay at (0.6, 1.2) (more A<0
tokens pass), above 0 where they park at (0.9, 3.0)". This table reads the paired difference
within each bounds pair the rule chose, with the same cluster bootstrap as the claims (trunk
seeds, then rollouts), on the claim's own states (its `where`). It is outside Holm: the split
is by the rule's own decision at the state, a description of where its effect comes from, not
a test of the rule.
"""

from __future__ import annotations

import pandas as pd

from analysis.claims.microscope import KEYS
from analysis.core.cluster_bootstrap import cluster_bootstrap
from analysis.reports.markdown import fmt_interval

MIN_STATES = 10  # a bounds pair held at fewer states is counted, not estimated
METRICS = {"d_entropy": "entropy change", "positive_share": "positive share",
           "d_logp_correct": "log p(correct) change"}


def effects_by_bounds(branches: pd.DataFrame, arm: str, ref: str, where: str | None) -> pd.DataFrame:
    """One row per (c_low, c_high) that `arm` chose and METRICS's metric: `arm - ref` paired
    by state, its mean and bootstrap interval, over the states where `arm` chose those bounds."""
    table = branches.query(where) if where else branches
    keys = KEYS["branches"]
    mine = table[table["arm"] == arm].set_index(keys)
    other = table[table["arm"] == ref].set_index(keys)
    rows = []
    for (low, high), states in mine.groupby(["c_low", "c_high"]).groups.items():
        for metric in METRICS:
            diff = (mine.loc[states, metric] - other[metric].reindex(states)).rename("value")
            boot = cluster_bootstrap(diff.dropna().reset_index(), "value")
            rows.append({"c_low": low, "c_high": high, "metric": metric, "states": boot.n,
                         "share": len(states) / len(mine), "mean": boot.mean, "low": boot.low,
                         "high": boot.high})
    return pd.DataFrame(rows)


def bounds_effects_table(branches: pd.DataFrame, arm: str, ref: str, where: str | None) -> list[str]:
    """The markdown table of effects_by_bounds, the most-held bounds first."""
    if arm not in set(branches["arm"]) or ref not in set(branches["arm"]):
        return [f"No {arm} and {ref} arms in these studies."]
    effects = effects_by_bounds(branches, arm, ref, where)
    lines = [f"| {arm}: (c_low, c_high) | share of its states | "
             + " | ".join(f"{label}, {arm} - {ref}" for label in METRICS.values()) + " |",
             "|---|---|" + "---|" * len(METRICS)]
    for (low, high), pair in effects.groupby(["c_low", "c_high"], sort=False):
        pair = pair.set_index("metric")
        n = int(pair["states"].max())
        cells = ([fmt_interval(pair.loc[m, "mean"], pair.loc[m, "low"], pair.loc[m, "high"])
                  for m in METRICS] if n >= MIN_STATES else ["not estimated"] * len(METRICS))
        lines.append((f"| ({low:g}, {high:g}) | {pair['share'].iloc[0]:.3f} ({n} state{'s' * (n != 1)}) | "
                      + " | ".join(cells) + " |", -n))
    head, rows = lines[:2], sorted(lines[2:], key=lambda line: line[1])
    return head + [line for line, _ in rows]
