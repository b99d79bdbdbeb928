"""The lag sweeps' runs: each run's lag in optimizer updates, and one row of numbers per run.

A run's lag comes from its config (docs/offpolicy.md, src/updates.py `lag_range`): with k
updates per rollout, the paper's fresh source trains on data 0..k-1 updates old, a delay
queue of K steps on data K*k..K*k+k-1 updates old. Replay and partial rollouts mix ages, so they carry the lag they
measured (update records' `policy_lag`) instead of a range from the config.

Comparisons only mean something between runs of one warm start: the runs of a lag report
must share it (`check_one_warm_start`), or the report stops and names the odd ones.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.core.final import updates_per_step, warmup_steps
from analysis.core.loader import Run, RunSet
from analysis.core.summary import run_summary
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


def run_meta(run: Run) -> dict:
    """The run's meta.json; {} where it is missing or unreadable."""
    try:
        return json.loads((run.path / "meta.json").read_text())
    except (OSError, ValueError):
        return {}


def warm_start(run: Run) -> tuple[str, str | None]:
    """(cache key, weights digest) of the warm-start build the run started from, as its
    meta.json records them; the key is 'none recorded' and the digest None where it does not
    (runs made before the digest was added carry only the key)."""
    meta = run_meta(run)
    ws, digest = meta.get("warm_start"), meta.get("warm_start_weights")
    key = str(ws).rstrip("/").rsplit("/", 1)[-1] if ws else "none recorded"
    return key, (str(digest) if digest else None)


def build_labels(runs: RunSet) -> dict[str, str | None]:
    """Per run: the warm-start build it started from, told apart by the weights digest, never
    by the cache key alone. The key names the build's inputs, and the SFT behind one key
    rounds differently on another CPU (the reproduction's root and the first lag root share
    key 5fb97ee7a8113be3 but start at greedy 0.465 and 0.398). A run without a digest is
    labelled by its key and its greedy accuracy at step 0, which every run of one build
    shares (the eval of the same weights on the same problems); None for a run with
    neither, which cannot be placed."""
    ev = runs.evals
    first = (ev[ev["step"] == 0].groupby("run_id", observed=True)["greedy_accuracy"].first()
             if not ev.empty and "greedy_accuracy" in ev else pd.Series(dtype=float))
    labels: dict[str, str | None] = {}
    for r in runs.runs:
        key, digest = warm_start(r)
        greedy = first.get(r.run_id, math.nan)
        if digest:
            labels[r.run_id] = f"{key} (weights {digest})"
        elif greedy == greedy:
            labels[r.run_id] = f"{key} (no weights digest; greedy {greedy:.4f} at step 0)"
        else:
            labels[r.run_id] = None
    return labels


def check_one_warm_start(runs: RunSet) -> str:
    """The one warm-start build every run shares (build_labels); ValueError naming the runs
    when they come from several, or when a run records neither a weights digest nor a
    step-0 eval (its build cannot be told).

    Accuracy differences between warm starts are not lag effects: this machine's build of
    the warm start can differ from another's (other CPUs round differently)."""
    labels = build_labels(runs)
    unplaced = sorted(r for r, label in labels.items() if label is None)
    if unplaced:
        raise ValueError(
            f"{len(unplaced)} run(s) record no warm-start weights digest and no step-0 eval, "
            f"so their build cannot be told: {', '.join(unplaced[:3])}"
            f"{' ...' if len(unplaced) > 3 else ''}; leave them out or rerun them")
    found = set(labels.values())
    if len(found) > 1:
        by_label: dict[str, list[str]] = {}
        for run_id, label in labels.items():
            by_label.setdefault(str(label), []).append(run_id)
        listing = "; ".join(f"{k}: {', '.join(v[:3])}{' ...' if len(v) > 3 else ''}"
                            for k, v in sorted(by_label.items()))
        raise ValueError(
            f"the runs come from {len(found)} warm starts ({listing}); a lag report compares "
            "runs of one warm start: pass run dirs made on one machine (or one --runs root)"
        )
    return next(iter(found), "unknown")


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


def lag_summary(runs: RunSet) -> pd.DataFrame:
    """run_summary (final accuracy, entropy drift, ...) plus lag columns and the steady
    part's clip fraction, mean |log r|, rho before the search and grad-clip share."""
    s = run_summary(runs)
    if s.empty:
        return s
    lags = lag_table(runs).drop(columns=["method", "seed", "experiment"])
    s = s.merge(lags, on="run_id", how="left")
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
