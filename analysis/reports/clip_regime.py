"""The clip family's regime per method and experiment: what each rule does to the tokens and
the gradient, beside what it does to accuracy (analysis/reports/clip_family.py).

From the steady update records (a delay queue's first K steps train on the initial weights'
rollouts and are left out, analysis/core/lags.py): the share of A>0 and of A<0 tokens whose
gradient the method removed (clip or mask), the shares of the clip states that keep a
changed gradient (sapo's `gated`, gppo's `preserved_*`, aspo's `dual_capped`), the positive
share of the gradient against bapo's rho0, and from the run summary the entropy drift,
alone and paired by seed against ppo. Each number is a run's mean over its updates, then
the mean over seeds with its 95% t half-width.
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.claims.clip_family import BASELINE, EXPERIMENTS, METHODS, PROPOSED, RHO0
from analysis.core.lags import steady_updates
from analysis.core.paired import UP, fmt_paired, paired_difference
from analysis.core.runs import RunSet
from analysis.core.stats import fmt_half, mean_ci

# Update-record keys averaged per run -> column shown, and whether it is shown in percent.
PER_UPDATE = {
    "clip_frac_pos": ("clipped A>0", True), "clip_frac_neg": ("clipped A<0", True),
    "gated_frac": ("gated", True), "preserved_low_frac": ("preserved_low", True),
    "preserved_high_frac": ("preserved_high", True), "dual_capped_frac": ("dual_capped", True),
    "contrib_grad_pos_share": ("pos share (tokens alike)", False),
    "sapo_grad_pos_share": ("pos share (as sapo's loss weighs)", False),
}
UNDER = "under_rho0"  # the share of a run's updates whose positive share is below rho0
DRIFT, DRIFT_VS = "entropy drift", f"entropy drift − {BASELINE} (paired)"


def rho0_of(runs: RunSet) -> float:
    """bapo's target share as its runs' config holds it (the paper's 0.4 where none ran)."""
    found = {float(r.cfg("method.bapo.rho0")) for r in runs.runs
             if (r.method_name or r.method) == PROPOSED and r.cfg("method.bapo.rho0") is not None}
    return found.pop() if len(found) == 1 else RHO0


def per_run(runs: RunSet, rho0: float) -> pd.DataFrame:
    """Per run_id: each PER_UPDATE key's mean over its steady updates (NaN where it logs none)
    and UNDER: its updates' share below rho0, the share as the loss weighs the tokens
    (sapo's own where logged, else every token alike, as bapo's search reads it)."""
    u = steady_updates(runs)
    if u.empty:
        return pd.DataFrame(columns=[*PER_UPDATE, UNDER])
    if "skipped" in u:  # a skipped update took no step and measured nothing
        u = u[~u["skipped"].astype("boolean").fillna(False).astype(bool)]
    cols = {k: pd.to_numeric(u[k], errors="coerce") if k in u else pd.Series(math.nan, u.index)
            for k in PER_UPDATE}
    share = cols["sapo_grad_pos_share"].fillna(cols["contrib_grad_pos_share"])
    cols[UNDER] = (share < rho0).astype(float).where(share.notna())
    return pd.DataFrame(cols).groupby(u["run_id"], observed=True).mean()


def _pm(values: pd.Series, percent: bool, digits: int | None = None) -> str:
    """'0.17% ± 0.05%' (2 decimals) or '0.383 ± 0.004' (3) over seeds; '—' where no run
    logs the number."""
    m, low, high, n = mean_ci(values)
    if not n:
        return "—"
    scale, unit = (100.0, "%") if percent else (1.0, "")
    digits = digits if digits is not None else (2 if percent else 3)
    text = f"{m * scale:.{digits}f}{unit}"
    if n < 2 or low == high:
        return text
    return f"{text} ± {fmt_half((high - low) / 2 * scale, digits)}{unit}"


def _drift_vs_baseline(cell: pd.DataFrame, baseline: pd.DataFrame) -> str:
    if cell["method"].iat[0] == BASELINE or baseline.empty:
        return "—"
    d = paired_difference(cell.set_index("seed")["entropy_drift"],
                          baseline.set_index("seed")["entropy_drift"])
    return fmt_paired(d, UP, digits=4)


def regime_table(runs: RunSet, summary: pd.DataFrame) -> pd.DataFrame:
    """One row per method and experiment (summary: one row per run, `method` its label)."""
    rho0 = rho0_of(runs)
    numbers = summary.join(per_run(runs, rho0), on="run_id")
    rows = []
    for (experiment, method), cell in numbers.groupby(["experiment", "method"], sort=False):
        baseline = numbers[(numbers["experiment"] == experiment)
                           & (numbers["method"] == BASELINE)]
        row = {"method": method, "experiment": experiment, "seeds": len(cell)}
        row.update({shown: _pm(cell[key], percent) for key, (shown, percent) in PER_UPDATE.items()})
        row[f"updates under rho0 {rho0:g}"] = _pm(cell[UNDER], True, digits=1)
        row[DRIFT] = _pm(cell["entropy_drift"], False, digits=4)
        row[DRIFT_VS] = _drift_vs_baseline(cell, baseline)
        rows.append(row)
    return ordered(pd.DataFrame(rows))


def ordered(table: pd.DataFrame) -> pd.DataFrame:
    """Rows by experiment (as the sweep lists them), then METHODS' order."""
    if table.empty:
        return table
    rank = {name: i for i, name in enumerate((*EXPERIMENTS, *METHODS))}
    return table.sort_values(["experiment", "method"],
                             key=lambda c: c.map(rank).fillna(len(rank))).reset_index(drop=True)
