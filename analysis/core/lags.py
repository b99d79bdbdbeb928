"""The lag sweeps' runs: each run's lag in optimizer updates, and one row of numbers per run.

A run's lag comes from its config (docs/offpolicy.md, src/updates.py `lag_range`): with k
updates per rollout, the paper's fresh source trains on data 0..k-1 updates old, a delay
queue of K steps on data K*k..K*k+k-1 updates old. Replay and partial rollouts mix ages, so they carry the lag they
measured (update records' `policy_lag`) instead of a range from the config.

Comparisons only mean something between runs of one warm start: the runs of a lag report
must share it (analysis/core/builds.py `check_one_warm_start`), or the report stops and
names the odd ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.core.entropy_law import drift_of
from analysis.core.final import updates_per_step, warmup_steps
from analysis.core.loader import Run, RunSet
from analysis.core.search_ceiling import annotate
from analysis.core.search_outcomes import searches_bounds
from analysis.core.summary import drift_windows, run_summary
from src.updates import lag_range

# Sources whose lag is a range fixed by the config.
RANGE_SOURCES = ("fresh", "delay")


@dataclass(frozen=True)
class Lag:
    """A run's data age in optimizer updates: [low, high] and the steps before the queue
    holds data of the run's own policy (`warmup_steps`: the delay's first K steps train on
    rollouts of the initial weights)."""

    low: int
    high: int
    warmup_steps: int = 0

    @property
    def label(self) -> str:
        return f"{self.low}" if self.low == self.high else f"{self.low}-{self.high}"


def source(run: Run) -> str:
    return str(run.cfg("offpolicy.source", "fresh") or "fresh")


def anchor(run: Run) -> str:
    return str(run.cfg("offpolicy.anchor", "coupled") or "coupled")


def lag_of(run: Run) -> Lag | None:
    """The config's lag range; None for sources that mix ages (replay, partial)."""
    src = source(run)
    if src not in RANGE_SOURCES:
        return None
    delay = warmup_steps(run)  # the delay queue's K steps; 0 for the fresh source
    return Lag(*lag_range(delay, updates_per_step(run)), warmup_steps=delay)


def steady_updates(runs: RunSet) -> pd.DataFrame:
    """Update records of the steps that train on data of the run's own policy (a delay's
    first K steps train on rollouts of the initial weights), with lag columns added."""
    u = runs.updates
    if u.empty:
        return u
    lags = lag_table(runs).set_index("run_id")
    u = u[u["run_id"].isin(lags.index)].copy()
    u["warmup_steps"] = u["run_id"].map(lags["warmup_steps"]).astype(int)
    u = u[u["step"] >= u["warmup_steps"]]
    for c in ("lag", "lag_low", "anchor", "source"):
        u[c] = u["run_id"].map(lags[c])
    return u.reset_index(drop=True)


def lag_table(runs: RunSet) -> pd.DataFrame:
    """One row per run: run_id, method, seed, source, anchor, lag label and bounds."""
    rows = []
    measured_lags = _measured_lags(runs)
    for r in runs.runs:
        lag = lag_of(r)
        measured = measured_lags.get((r.experiment, source(r)), math.nan) if lag is None else None
        rows.append({
            "run_id": r.run_id, "method": r.method, "seed": r.seed, "source": source(r),
            "anchor": anchor(r), "experiment": r.experiment,
            "lag": lag.label if lag else f"~{measured:.0f} ({source(r)})",
            "lag_low": lag.low if lag else (measured if measured is not None else math.nan),
            "lag_high": lag.high if lag else math.nan,
            "warmup_steps": lag.warmup_steps if lag else 0,
        })
    return pd.DataFrame(rows)


def _measured_lags(runs: RunSet) -> dict[tuple[str, str], float]:
    """Per (experiment, source): the mean `policy_lag` over every run of it, not per run:
    seeds and methods of one replay (or partial) cell draw different ages, and a label per
    run would split the cell (~23 for one seed, ~24 for the next) and its paired comparisons."""
    u = runs.updates
    if u.empty or "policy_lag" not in u:
        return {}
    cell = {r.run_id: (r.experiment, source(r)) for r in runs.runs}
    lag = pd.to_numeric(u["policy_lag"], errors="coerce")
    return {k: float(v) for k, v in lag.groupby(u["run_id"].map(cell)).mean().items()}


STEADY_STEP_MEANS = {"length_pos": "response_length_pos", "length_neg": "response_length_neg"}


def with_steady_steps(s: pd.DataFrame, runs: RunSet, warmup: pd.Series,
                      last_k: int = 5) -> pd.DataFrame:
    """The run summary's step quantities over the steady steps only (a delay queue's first
    K steps train on the initial weights' rollouts and say nothing of its lag): the entropy
    drift (its windows as drift_windows gives them, from the first steady step) and the
    response lengths by sign."""
    st = runs.steps
    st = st[st["step"] >= st["run_id"].map(warmup).fillna(0)].sort_values(["run_id", "step"])
    windows = drift_windows(runs, last_k)
    entropy = pd.to_numeric(st["entropy_mean"], errors="coerce") if "entropy_mean" in st else None
    out = s.set_index("run_id")
    if entropy is not None:
        out["entropy_drift"] = entropy.groupby(st["run_id"], observed=True).apply(
            lambda e: drift_of(e, windows.get(e.name, last_k)))
    for col, key in STEADY_STEP_MEANS.items():
        if key in st:
            out[col] = pd.to_numeric(st[key], errors="coerce").groupby(
                st["run_id"], observed=True).mean()
    return out.reset_index()


def lag_summary(runs: RunSet) -> pd.DataFrame:
    """run_summary (final accuracy, ...) plus lag columns and the steady part's entropy
    drift, response lengths, clip fraction, mean |log r|, rho before the search and
    grad-clip share: every lag quantity over the steady steps and updates."""
    s = run_summary(runs)
    if s.empty:
        return s
    lags = lag_table(runs).drop(columns=["method", "seed", "experiment"])
    s = s.merge(lags, on="run_id", how="left")
    s = with_steady_steps(s, runs, lags.set_index("run_id")["warmup_steps"])
    u = steady_updates(runs)
    if u.empty:
        return s
    g = u.assign(
        clip_frac=pd.to_numeric(u["clip_frac"], errors="coerce"),
        abs_log_ratio_mean=pd.to_numeric(u.get("abs_log_ratio_mean"), errors="coerce"),
        rho_before=pd.to_numeric(u.get("rho_before"), errors="coerce"),
        grad_clipped=u.get("grad_clipped", pd.Series(np.nan, index=u.index))
        .astype("boolean").astype(float),
    ).groupby("run_id", observed=True)
    steady = pd.DataFrame({
        "steady_clip_frac": g["clip_frac"].mean(),
        "steady_abs_log_r": g["abs_log_ratio_mean"].mean(),
        "steady_rho_before": g["rho_before"].mean(),
        "steady_grad_clipped": g["grad_clipped"].mean(),
    })
    return s.merge(steady, left_on="run_id", right_index=True, how="left")


def coupled_with_lag(runs: RunSet, method: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Step records and lag_table rows of `method`'s coupled runs with a config lag."""
    t = lag_table(runs)
    lags = t[(t["method"] == method) & (t["anchor"] == "coupled") & t["source"].isin(RANGE_SOURCES)]
    return runs.steps[runs.steps["run_id"].isin(lags["run_id"])], lags.reset_index(drop=True)


def searching_updates(runs: RunSet) -> pd.DataFrame:
    """Steady updates of the runs whose method searches its bounds, with `rho0` (the
    parameter its traits name as the target) and how each search ended against its ceiling
    (search_ceiling.annotate)."""
    # the steady updates of every run, then the searching ones: a replay or partial cell's
    # lag label pools all its runs (_measured_lags), so it matches the cell tables
    rho0 = {r.run_id: r.method_param(r.traits.target) for r in runs.select(searches_bounds)}
    u = steady_updates(runs)
    u = u[u["run_id"].isin(rho0)] if not u.empty else u
    return u if u.empty else annotate(u.assign(rho0=u["run_id"].map(rho0)), runs)
