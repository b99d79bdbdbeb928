"""Paper Eq. 6 per update: the entropy change predicted by the covariance against the one measured.

Eq. 6: an update changes entropy by about -eta * Cov(log pi, A * X) over its tokens (X = 1
where the token keeps its gradient). Every update record has that covariance
(`entropy_clip_cov`); with `logger.entropy_change=true` it also has `entropy_change`, the
mean entropy of the update's own mini-batch tokens just after its optimizer step minus just
before. So `-entropy_clip_cov` is the prediction up to a positive factor (the step size,
which SGD momentum and gradient clipping make no exact eta), and only its sign and its
correlation with the measured change are tested, never its scale.

Also the entropy drift of a run (the random-reward experiment's headline number): mean
`entropy_mean` of its last k steps minus that of its first k; and the summed update change
of a run, the sum of its updates' measured `entropy_change`: what the updates did to the
entropy of their own tokens, free of the sampling noise of fresh rollouts that the drift
carries.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.core.loader import RUN_COLS, RunSet
from analysis.core.stats import mean_ci, wilson

PREDICTED = "predicted"  # -entropy_clip_cov
MEASURED = "entropy_change"


def has_entropy_change(runs: RunSet) -> bool:
    u = runs.updates
    return MEASURED in u.columns and pd.to_numeric(u[MEASURED], errors="coerce").notna().any()


def update_pairs(runs: RunSet) -> pd.DataFrame:
    """One row per applied update with both numbers: RUN_COLS, step, update, predicted
    (= -entropy_clip_cov), entropy_change. Skipped updates have no change and are left out."""
    cols = [*RUN_COLS, "step", "update", PREDICTED, MEASURED]
    u = runs.updates
    if not has_entropy_change(runs) or "entropy_clip_cov" not in u.columns:
        return pd.DataFrame(columns=cols)
    out = u[[*RUN_COLS, "step", "update"]].assign(
        **{PREDICTED: -pd.to_numeric(u["entropy_clip_cov"], errors="coerce"),
           MEASURED: pd.to_numeric(u[MEASURED], errors="coerce")})
    out = out[np.isfinite(out[PREDICTED]) & np.isfinite(out[MEASURED])]
    return out[cols].reset_index(drop=True)


def summed_change(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per run: RUN_COLS and `summed_change`, the sum of its updates' measured entropy change
    (nats/token; each update's own mini-batch, after its step minus before)."""
    if pairs.empty:
        return pd.DataFrame(columns=[*RUN_COLS, "summed_change"])
    return (pairs.groupby("run_id", observed=True, sort=True)
            .agg(**{c: (c, "first") for c in RUN_COLS if c != "run_id"},
                 summed_change=(MEASURED, "sum"))
            .reset_index())


def pearson(x: pd.Series | np.ndarray, y: pd.Series | np.ndarray) -> float:
    """Pearson r; NaN with fewer than 3 pairs or a constant side (r is undefined there)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 3 or x.std() == 0 or y.std() == 0:
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


def sign_agreement(predicted: pd.Series, measured: pd.Series) -> tuple[int, int]:
    """(agreeing, counted): updates where sign(predicted) == sign(measured), counting only
    updates where neither is exactly 0 (no sign to agree with)."""
    p, m = np.sign(np.asarray(predicted, float)), np.sign(np.asarray(measured, float))
    counted = (p != 0) & (m != 0)
    return int((p[counted] == m[counted]).sum()), int(counted.sum())


LAW_COLS = ["method", "staleness", "updates", "seeds", "r_pooled", "r_mean", "r_low", "r_high",
            "r_seeds", "agree", "counted", "agree_share", "agree_low", "agree_high",
            "seed_agree_mean", "seed_agree_low", "seed_agree_high", "seed_agree_n"]


def seed_agreement(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per (method, staleness, seed): the share of the run's updates whose predicted and
    measured entropy change have one sign. A seed is an independent replicate; its
    updates are not (they share rollouts and optimizer momentum)."""
    rows = []
    for (method, k, seed), g in pairs.groupby(["method", "staleness", "seed"], sort=True,
                                               observed=True):
        agree, counted = sign_agreement(g[PREDICTED], g[MEASURED])
        rows.append({"method": method, "staleness": int(k), "seed": int(seed),
                     "share": agree / counted if counted else math.nan})
    return pd.DataFrame(rows, columns=["method", "staleness", "seed", "share"])


def law_by_cell(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per (method, staleness) of one suite: the Pearson r of predicted vs measured over all
    its updates (pooled) and per seed (mean and 95% Student-t interval over seeds: seeds
    are the independent replicates); the sign-agreement share pooled over updates with its
    Wilson interval (which counts updates as independent draws: descriptive only), and per
    seed (mean and 95% Student-t interval of the seeds' shares: what a verdict uses)."""
    per_seed_share = seed_agreement(pairs).groupby(["method", "staleness"], observed=True)["share"]
    rows = []
    for (method, k), g in pairs.groupby(["method", "staleness"], sort=True, observed=True):
        per_seed = [pearson(s[PREDICTED], s[MEASURED]) for _, s in g.groupby("seed", sort=True)]
        r_mean, r_low, r_high, r_n = mean_ci(per_seed)
        agree, counted = sign_agreement(g[PREDICTED], g[MEASURED])
        share, low, high = wilson(agree, counted)
        rows.append({"method": method, "staleness": int(k), "updates": len(g),
                     "seeds": int(g["seed"].nunique()), "r_pooled": pearson(g[PREDICTED], g[MEASURED]),
                     "r_mean": r_mean, "r_low": r_low, "r_high": r_high, "r_seeds": r_n,
                     "agree": agree, "counted": counted, "agree_share": share, "agree_low": low,
                     "agree_high": high,
                     **dict(zip(["seed_agree_mean", "seed_agree_low", "seed_agree_high",
                                 "seed_agree_n"],
                                mean_ci(per_seed_share.get_group((method, k))), strict=True))})
    return pd.DataFrame(rows, columns=LAW_COLS)


def drift_of(entropy: pd.Series, k: int) -> float:
    """The entropy drift of one run: mean of its last k values minus its first k (the one
    entropy convention of the report; negative = entropy fell). NaN with fewer than 2k
    values, where the two windows would overlap."""
    e = entropy.dropna()
    return float(e.tail(k).mean() - e.head(k).mean()) if len(e) >= 2 * k else math.nan


def entropy_drift(runs: RunSet, k: int) -> pd.DataFrame:
    """Per run: RUN_COLS and `drift`, the mean `entropy_mean` (behaviour policy, nats/token)
    of its last k complete steps minus its first k. NaN when a run has fewer than 2k steps
    (the two windows would overlap)."""
    steps = runs.steps
    if steps.empty or "entropy_mean" not in steps.columns:
        return pd.DataFrame(columns=[*RUN_COLS, "drift"])
    steps = steps.assign(entropy=pd.to_numeric(steps["entropy_mean"], errors="coerce"))
    rows = []
    for run_id, g in steps.sort_values(["run_id", "step"]).groupby("run_id", observed=True):
        rows.append({**g[RUN_COLS].iloc[0].to_dict(), "run_id": run_id,
                     "drift": drift_of(g["entropy"], k)})
    return pd.DataFrame(rows, columns=[*RUN_COLS, "drift"])
