"""Read run dirs (docs/run_dir.md) into tidy DataFrames, tolerating broken runs.

Every problem is reported as a message and costs at most the run it is in: a run dir
without config.yaml is skipped; an unfinished or crashed run is used up to its last
complete step (a step is complete when its `kind: step` record exists); a truncated last
JSONL line or an unreadable Parquet part is dropped. Token rows are read lazily, per run
and per figure, with only the columns the figure asks for.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.core.cells import Grouping, cell_key
from analysis.core.run_dirs import discover, identity, read_config, read_json, read_metrics
from analysis.core.runs import RUN_COLS, Run, RunSet, read_tokens, registry_traits
from src._numerics import numerics_family

__all__ = ["RUN_COLS", "Run", "RunSet", "load_runs", "read_metrics", "read_tokens", "registry_traits"]

_PART_RE = re.compile(r"step_(\d+)")


def _records(path: Path, notes: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The metrics file's step, update and eval records; a resumed run may re-log steps
    after its last checkpoint, and the later record wins."""
    records, jnotes = read_metrics(path)
    notes += jnotes
    by_kind: dict[str, list[dict[str, Any]]] = {"step": [], "update": [], "eval": []}
    for rec in records:
        if rec.get("kind") in by_kind and rec.get("step") is not None:
            by_kind[rec["kind"]].append(rec)
    n_before = sum(map(len, by_kind.values()))
    by_kind["step"] = _last_per_key(by_kind["step"], ("step",))
    by_kind["update"] = _last_per_key(by_kind["update"], ("step", "update"))
    by_kind["eval"] = _last_per_key(by_kind["eval"], ("step",))
    if (dups := n_before - sum(map(len, by_kind.values()))) > 0:
        notes.append(f"{dups} repeated records (resume?); kept the last of each")
    return by_kind


def _complete(by_kind: dict[str, list[dict[str, Any]]], steps: list[int], status: str,
              status_obj: dict | None, notes: list[str]) -> tuple[list[dict], list[dict]]:
    """The update and eval records of the complete steps (`steps`)."""
    done = set(steps)
    updates = [r for r in by_kind["update"] if int(r["step"]) in done]
    if len(updates) < len(by_kind["update"]):
        late = sorted({int(r["step"]) for r in by_kind["update"]} - done)
        notes.append(
            f"dropped {len(by_kind['update']) - len(updates)} update records of "
            f"incomplete step(s) {late}"
        )
    evals = by_kind["eval"]
    if status != "finished":
        # eval.step counts completed steps (src/trainer.py: 0 before training, s + 1 after
        # step s), so an eval past last + 1 would follow a step whose records were dropped.
        evals = [r for r in evals if int(r["step"]) <= steps[-1] + 1]
        err = (status_obj or {}).get("error")
        notes.append(
            f"status {status}{f' ({err})' if err else ''}: used up to its last "
            f"complete step {steps[-1]}"
        )
    return updates, evals


def _token_parts(path: Path, done: set[int], notes: list[str]) -> list[Path]:
    """The token parts of complete steps; those of steps that never completed are dropped."""
    parts, late_parts = [], 0
    for p in sorted((path / "tokens").glob("*.parquet")):
        m = _PART_RE.search(p.name)
        if m and int(m.group(1)) not in done:
            late_parts += 1  # its step never completed
            continue
        parts.append(p)
    if late_parts:
        notes.append(f"dropped {late_parts} token part(s) of incomplete steps")
    if not parts:
        notes.append("no token parts (tokens/*.parquet); token figures leave this run out")
    return parts


def _load_one(root: Path, path: Path) -> tuple[Run, dict[str, pd.DataFrame]] | str:
    """A usable run with its frames, or the reason it is skipped."""
    cfg = read_config(path)
    if isinstance(cfg, str):
        return cfg
    meta = read_json(path / "meta.json") or {}
    ident = identity(cfg, meta, path)
    if isinstance(ident, str):
        return ident
    status_obj = read_json(path / "status.json")
    notes: list[str] = [] if status_obj is not None else ["no readable status.json"]
    status = str((status_obj or {}).get("status", "unknown"))
    by_kind = _records(path, notes)
    steps = sorted({int(r["step"]) for r in by_kind["step"]})
    if not steps:
        return f"status {status}, no complete step (no kind: step record)"
    updates, evals = _complete(by_kind, steps, status, status_obj, notes)
    parts = _token_parts(path, set(steps), notes)
    rel = path.relative_to(root).as_posix()
    run = Run(
        run_id=root.name if rel == "." else f"{root.name}/{rel}",
        path=path,
        status=status,
        config=cfg,
        complete_steps=steps,
        token_parts=parts,
        notes=notes,
        token_sample_fraction=(meta.get("export") or {}).get("response_fraction"),
        numerics_family=numerics_family(meta["numerics"]) if meta.get("numerics") else "unrecorded",
        **ident,
    )
    frames = {
        "steps": pd.DataFrame.from_records(by_kind["step"]),
        "updates": pd.DataFrame.from_records(updates),
        "evals": pd.DataFrame.from_records(evals),
    }
    return run, frames


def _last_per_key(records: list[dict[str, Any]], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    return list({tuple(r.get(k) for k in keys): r for r in records}.values())


def _frame(parts: list[tuple[Run, pd.DataFrame]]) -> pd.DataFrame:
    """Concatenate one kind of record over runs, identity columns first."""
    out = [df.assign(**{c: getattr(run, c) for c in RUN_COLS}) for run, df in parts if len(df)]
    if not out:
        return pd.DataFrame(columns=[*RUN_COLS, "step"])
    df = pd.concat(out, ignore_index=True)
    front = [*RUN_COLS, "step"]
    df = df[front + [c for c in df.columns if c not in front and c != "kind"]]
    return df.sort_values(["run_id", "step"], kind="stable").reset_index(drop=True)


def load_runs(roots: Iterable[Path | str]) -> RunSet:
    """Load every run dir under `roots` (recursively); never raises for a bad run."""
    found, messages = discover(Path(r) for r in roots)
    runs: list[Run] = []
    loaded: dict[str, dict[str, pd.DataFrame]] = {}
    skipped: list[tuple[str, str]] = []
    for root, path in found:
        try:
            res = _load_one(root, path)
        except Exception as e:  # noqa: BLE001 - one odd run must not stop the others
            res = f"could not be read ({type(e).__name__}: {e})"
        if isinstance(res, str):
            skipped.append((str(path), res))
            continue
        run, frames = res
        while run.run_id in loaded:  # two roots with the same name and layout
            run.run_id += "+"
        runs.append(run)
        loaded[run.run_id] = frames

    runs, partial = _drop_partial_configs(runs)
    skipped += partial
    for r in runs:
        r.cell = cell_key(r.config)
    runs, dup = _dedupe(runs)
    suites = Grouping(runs).assign()
    for r in runs:
        r.suite_rank = suites.index(r.suite)
    runs.sort(key=lambda r: (r.suite_rank, r.experiment, r.method, r.staleness, r.seed, r.run_id))
    skipped += dup
    for r in runs:
        messages += [f"{r.run_id}: {n}" for n in r.notes]
    messages += [f"{p}: skipped, {why}" for p, why in skipped]
    merged = {
        k: _frame([(r, loaded[r.run_id][k]) for r in runs]) for k in ("steps", "updates", "evals")
    }
    return RunSet(runs=runs, messages=messages, skipped=skipped, **merged)


# Sections every config.yaml that src.run writes has had from the start.
RUN_SECTIONS = ("seed", "device", "method", "model", "task", "rollout", "train", "eval")


def _drop_partial_configs(runs: list[Run]) -> tuple[list[Run], list[tuple[str, str]]]:
    """Beside runs with whole configs, a run whose config.yaml lacks sections cannot be
    placed in a cell: grouped as it is, it became a suite of its own named by the missing
    keys (`device=None`). Skipped with a note instead. (Runs that all lack the same
    sections, e.g. hand-made ones, are left alone: there is nothing to compare them with.)"""
    if not any(all(k in r.config for k in RUN_SECTIONS) for r in runs):
        return runs, []
    kept, skipped = [], []
    for r in runs:
        missing = [k for k in RUN_SECTIONS if k not in r.config]
        if missing:
            skipped.append((str(r.path), f"partial config.yaml (no {', '.join(missing)}), so "
                                         "its cell cannot be told"))
        else:
            kept.append(r)
    return kept, skipped


def _dedupe(runs: list[Run]) -> tuple[list[Run], list[tuple[str, str]]]:
    # The same run reached through two roots (runs/ and a committed copy) must count once:
    # the same cell (every numeric config key), seed and CPU family (another family's run
    # of the same cell has other numbers: it is a run of its own).
    best: dict[tuple[str, int, str], Run] = {}
    skipped = []
    for r in runs:
        key = (r.cell, r.seed, r.numerics_family)
        old = best.get(key)
        if old is None:
            best[key] = r
            continue
        keep, drop = (r, old) if len(r.complete_steps) > len(old.complete_steps) else (old, r)
        best[key] = keep
        skipped.append(
            (
                str(drop.path),
                f"duplicate of {keep.run_id} (same config, seed and CPU family); kept the longer one",
            )
        )
    return list(best.values()), skipped
