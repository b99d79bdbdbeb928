"""The random-reward experiment in REPORT.md: its per-cell table and what its columns mean
(its claim rows are analysis/claims/random_reward.py's).

Under `task.reward=random` the rewards are coin flips, so nothing can be learned and what
moves entropy is the clipping rule and staleness alone (the `random_reward` sweep).
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.claims.random_reward import bounds, cells, mode, random_suites, steps, suite_claims
from analysis.core import style
from analysis.core.entropy_law import entropy_drift, law_by_cell, summed_change, update_pairs
from analysis.core.loader import RunSet
from analysis.core.stats import fmt_ci, mean_ci

__all__ = ["cell_table", "intro", "random_suites", "suite_claims"]


def cell_table(runs: RunSet, summary: pd.DataFrame, last_k: int) -> pd.DataFrame:
    """One formatted row per cell of every random-reward suite: drift, clip fraction,
    correlation and sign agreement."""
    rows = []
    suites = random_suites(runs)
    for suite in suites:
        part = runs.subset(lambda r, s=suite: r.suite == s)
        drift = entropy_drift(part, last_k)
        pairs = update_pairs(part)
        summed = summed_change(pairs)
        law = law_by_cell(pairs).set_index(["method", "staleness"])
        clip = summary[summary["suite"] == suite]
        for method, k in cells(part.runs):
            cell = [r for r in part.runs if r.method == method and r.staleness == k]
            d = drift[(drift["method"] == method) & (drift["staleness"] == k)]["drift"]
            c = clip[(clip["method"] == method) & (clip["staleness"] == k)]["clip_frac"]
            g = clip[(clip["method"] == method) & (clip["staleness"] == k)].get(
                "grad_clip_share", pd.Series(dtype=float))
            row = {"suite": suite, "mode": mode(cell), "method": method,
                   "bounds": bounds(cell), "staleness": style.staleness_label(k),
                   "steps": steps(cell),
                   "entropy drift (nats/token)": fmt_ci(*mean_ci(d), 4),
                   "clip frac": fmt_ci(*mean_ci(c), 4),
                   "grad-norm clipped": fmt_ci(*mean_ci(g), 2)}
            u = summed[(summed["method"] == method) & (summed["staleness"] == k)]
            if not u.empty:
                row["summed update change (nats/token)"] = fmt_ci(*mean_ci(u["summed_change"]), 4)
            if (method, k) in law.index:
                x = law.loc[(method, k)]
                row.update({
                    "r per seed": fmt_ci(x["r_mean"], x["r_low"], x["r_high"], int(x["r_seeds"]), 2),
                    "r pooled": "—" if math.isnan(x["r_pooled"]) else f"{x['r_pooled']:.2f}",
                    "sign agreement per seed": fmt_ci(
                        x["seed_agree_mean"], x["seed_agree_low"], x["seed_agree_high"],
                        int(x["seed_agree_n"])),
                    "pooled [Wilson 95%]": (f"{x['agree_share']:.3f} [{x['agree_low']:.3f}, "
                                            f"{x['agree_high']:.3f}]") if x["counted"] else "—",
                    "updates": str(int(x["updates"]))})
            rows.append(row)
    table = pd.DataFrame(rows)
    if table.empty or len(suites) <= len(table[["mode", "steps"]].drop_duplicates()):
        table = table.drop(columns=["suite"], errors="ignore")  # mode and steps tell them apart
    return table.fillna("—")


def intro(last_k: int) -> str:
    """What the random-reward table's columns mean (REPORT.md)."""
    return (
        "Rewards are coin flips (`task.reward=random`): nothing can be learned, so what moves "
        "entropy is the clipping rule and staleness. Its suites' claim rows (under Paper "
        "claims) test the paper's entropy account in place of its learning claims. steps: "
        "rollout steps per run. "
        f"entropy drift: mean `entropy_mean` (behaviour policy) of the last {last_k} steps "
        f"minus the first {last_k}, per run; mean ± 95% Student-t half-width over seeds (n). "
        "clip frac: share of tokens whose gradient was clipped, mean over steps. grad-norm "
        "clipped: share of updates whose gradient norm was clipped at `train.grad_clip`. summed "
        "update change: per run, the sum over its updates of the measured `entropy_change` "
        "(what the updates did to the entropy of their own tokens, without the sampling noise "
        "of fresh rollouts that the drift carries; a descriptive column, no claim row tests "
        "it); mean ± 95% Student-t half-width over seeds. r: Pearson "
        "correlation over updates of the Eq. 6 prediction −`entropy_clip_cov` with the measured "
        "`entropy_change` (the update's own mini-batch, after its optimizer step minus before); "
        "per seed: mean ± 95% Student-t half-width over the seeds' r; pooled: all the cell's "
        "updates. sign agreement: share of updates where the two have one sign (zeros left "
        "out); per seed: each seed's share, mean ± 95% Student-t half-width over seeds (what "
        "the claim rows use: a run's updates share rollouts and momentum, so they are no "
        "independent draws); pooled: all the cell's updates with the Wilson interval that "
        "counts them as independent, descriptive only. Figure: `fig_entropy_law`."
    )
