"""Which warm-start build a run started from: told apart by the weights digest in meta.json,
never by the cache key alone (the SFT behind one key rounds differently on another CPU).
A lag report's runs must share one build, or it stops and names the odd ones."""

from __future__ import annotations

import json
import math

import pandas as pd

from analysis.core.runs import Run, RunSet


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
