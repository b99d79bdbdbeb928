"""An adaptive rule against its reference, split by where the rule's bounds sat at each state.

A claim row that pools an adaptive rule's states (its bounds differ between them) against a
reference can average effects of opposite sign: E3.entropy's expectation, written before the
study ran, says bapo - ppo on the entropy is "below 0 where the bounds stay at (0.6, 1.2),
above 0 where they park at (0.9, 3.0)", which its pooled row cannot judge. So every such
row is also read within each bounds pair the rule chose: the paired difference on the row's
own states (its `where`), with the claims' cluster bootstrap (trunk seeds, then rollouts).
Rows with the same rule, reference and states share one table, a column each. Outside Holm:
the split is by the rule's own decision at the state, a description of where its effect
comes from, not a test of the rule. Which rule and reference come from the claim rows only.
"""

from __future__ import annotations

import pandas as pd

from analysis.claims.microscope import KEYS, Claim
from analysis.core.cluster_bootstrap import cluster_bootstrap
from analysis.reports.markdown import fmt_interval

MIN_STATES = 10  # a bounds pair held at fewer states is counted, not estimated


def adaptive_arms(branches: pd.DataFrame) -> set[str]:
    """The arms whose (c_low, c_high) differ between states."""
    bounds = branches.dropna(subset=["c_low", "c_high"])
    return {arm for arm, mine in bounds.groupby("arm")
            if len(mine[["c_low", "c_high"]].drop_duplicates()) > 1}


def split_groups(claims: list[Claim], branches: pd.DataFrame) -> dict[tuple, list[Claim]]:
    """The claim rows to split, by (arm, ref, where): one-update rows of an adaptive arm
    against a reference arm."""
    adaptive = adaptive_arms(branches)
    groups: dict[tuple, list[Claim]] = {}
    for c in claims:
        if c.table == "branches" and c.ref and c.arm in adaptive:
            groups.setdefault((c.arm, c.ref, c.where), []).append(c)
    return groups


def effects_by_bounds(branches: pd.DataFrame, arm: str, ref: str, where: str | None,
                      metrics: list[str]) -> pd.DataFrame:
    """One row per (c_low, c_high) that `arm` chose and metric: `arm - ref` paired by state,
    its mean and bootstrap interval, over the states where `arm` chose those bounds."""
    table = branches.query(where) if where else branches
    keys = KEYS["branches"]
    mine = table[table["arm"] == arm].set_index(keys)
    other = table[table["arm"] == ref].set_index(keys)
    rows = []
    for (low, high), states in mine.groupby(["c_low", "c_high"]).groups.items():
        for metric in metrics:
            diff = (mine.loc[states, metric] - other[metric].reindex(states)).rename("value")
            boot = cluster_bootstrap(diff.dropna().reset_index(), "value")
            rows.append({"c_low": low, "c_high": high, "metric": metric, "states": boot.n,
                         "share": len(states) / len(mine), "mean": boot.mean, "low": boot.low,
                         "high": boot.high})
    return pd.DataFrame(rows)


def bounds_effects_table(branches: pd.DataFrame, claims: list[Claim]) -> list[str]:
    """The markdown table of one group of split_groups: a column per claim row, a line per
    bounds pair, the most-held pair first."""
    arm, ref, where = claims[0].arm, claims[0].ref, claims[0].where
    metrics = list(dict.fromkeys(c.metric for c in claims))
    effects = effects_by_bounds(branches, arm, ref, where, metrics)
    if effects.empty:
        return [f"No {arm} states on `{where}` yet."]
    lines = [f"| {arm}: (c_low, c_high) | share of its states | "
             + " | ".join(f"{m}, {arm} - {ref}" for m in metrics) + " |",
             "|---|---|" + "---|" * len(metrics)]
    most_held_first = effects.sort_values("share", ascending=False, kind="stable")
    for (low, high), pair in most_held_first.groupby(["c_low", "c_high"], sort=False):
        pair = pair.set_index("metric")
        n = int(pair["states"].max())
        cells = ([fmt_interval(pair.loc[m, "mean"], pair.loc[m, "low"], pair.loc[m, "high"])
                  for m in metrics] if n >= MIN_STATES else ["not estimated"] * len(metrics))
        lines.append(f"| ({low:g}, {high:g}) | {pair['share'].iloc[0]:.3f} ({n} state{'s' * (n != 1)}) | "
                     + " | ".join(cells) + " |")
    return lines


def bounds_section(branches: pd.DataFrame, claims: list[Claim]) -> list[str]:
    """The report's section: per group, the rows it splits with their expectations, then the
    table. Empty where no claim row pools an adaptive rule."""
    groups = split_groups(claims, branches)
    if not groups:
        return []
    lines = ["", "## Adaptive rules against their references, by where the bounds sat", "",
             "A row that pools an adaptive rule's states averages states where its bounds "
             "differed; each pair the rule chose is read alone here, on the row's states, with "
             "the claims' cluster bootstrap. Outside Holm: the split is by the rule's own "
             "decision at the state (analysis/reports/microscope_bounds.py)."]
    for (arm, ref, where), mine in groups.items():
        lines += ["", f"{arm} - {ref} on `{where}`: " + "; ".join(
            f"{c.id}, expected before the runs \"{c.expect}\"" for c in mine) + ".", "",
                  *bounds_effects_table(branches, mine)]
    return lines
