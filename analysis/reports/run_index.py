"""figures/runs.csv: which run dir holds which run, in words a person can read.

Run dirs of non-default settings are named `overrides-<hash>/`; this index maps every run
dir to its suite, experiment, method, staleness, seed and the config overrides it was
started with (meta.json `overrides`, without the seed, method and experiment that the
other columns give).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from analysis.core.loader import RunSet

IDENTITY = ("seed=", "method=", "experiment=")  # shown in their own columns
COLUMNS = ["dir", "suite", "experiment", "method", "staleness", "seed", "overrides", "steps"]


def _overrides(path: Path) -> str:
    try:
        meta = json.loads((path / "meta.json").read_text())
    except (OSError, ValueError):
        return ""
    given = meta.get("overrides") or []
    return " ".join(str(x) for x in given if not str(x).startswith(IDENTITY))


def _shown_path(path: Path) -> str:
    """The dir relative to the working dir where it lies below it (as --runs names it)."""
    rel = os.path.relpath(path)
    return Path(path).as_posix() if rel.startswith("..") else Path(rel).as_posix()


def run_index(runs: RunSet, labels: dict[str, str]) -> pd.DataFrame:
    """One row per run, ordered by dir; `labels` maps suite names to their short labels."""
    rows = [{"dir": _shown_path(r.path), "suite": labels.get(r.suite, r.suite),
             "experiment": r.experiment, "method": r.method, "staleness": r.staleness,
             "seed": r.seed, "overrides": _overrides(r.path), "steps": len(r.complete_steps)}
            for r in runs.runs]
    return pd.DataFrame(rows, columns=COLUMNS).sort_values("dir", kind="stable").reset_index(drop=True)
