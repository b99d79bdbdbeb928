"""Read run dirs (docs/run_dir.md) into tidy DataFrames, tolerating broken runs.

Every problem is reported as a message and costs at most the run it is in: a run dir
without config.yaml is skipped; an unfinished or crashed run is used up to its last
complete step (a step is complete when its `kind: step` record exists); a truncated last
JSONL line or an unreadable Parquet part is dropped. Token rows are read lazily, per run
and per figure, with only the columns the figure asks for.
"""

from __future__ import annotations

import functools
import json
import os
import re
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import yaml

from analysis.core.cells import Grouping, cell_key
from src.run_vocab import MethodTraits, upgrade_method_layout

# `suite` and `method` as analysis/core/cells.py assigns them: `method` is the label shown (the
# method's name, plus its differing parameters when a suite holds several variants).
RUN_COLS = ["run_id", "suite", "experiment", "method", "staleness", "seed"]
_TABLE_EXTRA = [
    "method_name",
    "cell",
    "objective",
    "status",
    "steps_used",
    "last_step",
    "train_steps",
    "c_low",
    "c_high",
    "has_tokens",
    "path",
    "notes",
]
_SKIP_DIRS = {"tokens", "checkpoints", "__pycache__"}
_PART_RE = re.compile(r"step_(\d+)")
# clip_state as a dictionary column: pandas gets a Categorical, ~10x cheaper than strings.
_DICT_COLS = ["clip_state"]
_PARQUET = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=_DICT_COLS))
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def registry_traits(objective: str, params: tuple[str, ...] = ()) -> MethodTraits:
    """A method's traits from the method registry (it imports torch, so only when a run's
    config lacks them); an objective the registry does not know has none, and neither has
    a run whose `params` (its method section's keys) today's method does not take: an
    earlier definition under the same name made it (m2po's `tau`, its masking rule before
    it became the authors' clip)."""
    import dataclasses

    from src.algorithms import METHODS

    method = METHODS.get(objective)
    if method is None or not set(params) <= {f.name for f in dataclasses.fields(method.Params)}:
        return MethodTraits()
    return method.traits


@dataclass
class Run:
    """One usable run: identity, config, and which steps/token parts are complete."""

    run_id: str
    path: Path
    experiment: str
    method: str
    staleness: int
    seed: int
    status: str
    config: dict[str, Any]
    complete_steps: list[int]
    token_parts: list[Path]
    notes: list[str] = field(default_factory=list)
    bad_parts: set[Path] = field(default_factory=set)
    # Set for exported runs (experiments/export_results.py): the share of responses whose
    # token rows were kept. None: every token row is there.
    token_sample_fraction: float | None = None
    # analysis/core/cells.py: `method_name` is config method.name; `method` becomes its label in
    # the suite; `cell` is the id of (experiment, method, every numeric key except seed).
    method_name: str = ""
    cell: str = ""
    suite: str = ""
    suite_slug: str = ""
    suite_rank: int = 0

    @property
    def last_step(self) -> int:
        return self.complete_steps[-1]

    @property
    def traits(self) -> MethodTraits:
        """What the run's method is (adaptive bounds, the record keys of its decision): its
        config's `method.traits`, or, for runs written before those, the registry's."""
        stored = self.cfg("method.traits")
        if isinstance(stored, dict):
            return MethodTraits.from_config(stored)
        objective = self.cfg("method.objective") or self.method_name
        params = self.cfg(f"method.{objective}")
        return registry_traits(objective, tuple(sorted(params)) if isinstance(params, dict) else ())

    def method_param(self, key: str, default: Any = None) -> Any:
        """A parameter of the run's method: config `method.<objective>.<key>`."""
        return self.cfg(f"method.{self.cfg('method.objective')}.{key}", default)

    def cfg(self, dotted: str, default: Any = None) -> Any:
        node: Any = self.config
        for key in dotted.split("."):
            if not isinstance(node, dict) or key not in node:
                return default
            node = node[key]
        return node


@dataclass
class RunSet:
    """All usable runs plus their tidy step/update/eval frames and what was skipped."""

    runs: list[Run]
    steps: pd.DataFrame
    updates: pd.DataFrame
    evals: pd.DataFrame
    messages: list[str]
    skipped: list[tuple[str, str]]

    @property
    def table(self) -> pd.DataFrame:
        """One row per run: identity, status, steps used, bounds from the config."""
        rows = [
            {
                **{c: getattr(r, c) for c in RUN_COLS},
                "method_name": r.method_name,
                "cell": r.cell,
                "objective": r.cfg("method.objective"),
                "status": r.status,
                "steps_used": len(r.complete_steps),
                "last_step": r.last_step,
                "train_steps": r.cfg("train.steps"),
                "c_low": r.method_param("c_low"),
                "c_high": r.method_param("c_high"),
                "has_tokens": bool(r.token_parts),
                "path": str(r.path),
                "notes": "; ".join(r.notes),
            }
            for r in self.runs
        ]
        return pd.DataFrame(rows, columns=[*RUN_COLS, *_TABLE_EXTRA])

    @property
    def methods(self) -> list[str]:
        return sorted({r.method for r in self.runs})

    @property
    def suites(self) -> list[str]:
        """Suite labels, in the order analysis/core/cells.py ranked them (largest first)."""
        return list(dict.fromkeys(r.suite for r in sorted(self.runs, key=lambda r: r.suite_rank)))

    def select(self, pred: Callable[[Run], bool]) -> list[Run]:
        return [r for r in self.runs if pred(r)]

    def subset(self, pred: Callable[[Run], bool]) -> RunSet:
        keep = self.select(pred)
        ids = {r.run_id for r in keep}
        f = lambda df: df[df["run_id"].isin(ids)].reset_index(drop=True)  # noqa: E731
        return RunSet(
            keep, f(self.steps), f(self.updates), f(self.evals), self.messages, self.skipped
        )

    def tokens(
        self,
        columns: list[str],
        runs: Iterable[Run] | None = None,
        *,
        sample: int | None = None,
        seed: int = 0,
    ) -> pd.DataFrame:
        """Token rows of `runs` (default all), only `columns`, with RUN_COLS attached.

        `sample` caps the rows kept per run (uniform, seeded: reruns plot the same dots).
        Runs without usable token parts are left out, with a message.
        """
        runs = list(self.runs if runs is None else runs)
        cats = {
            c: sorted({getattr(r, c) for r in self.runs})
            for c in ("run_id", "suite", "method", "experiment")
        }
        frames = []
        for run in runs:
            table = read_tokens(run, columns, self._note)
            if table is None or table.num_rows == 0:
                continue
            if sample is not None and table.num_rows > sample:
                # Seeded by the run's id: the same run gives the same dots in any selection.
                rng = np.random.default_rng([seed, zlib.crc32(run.run_id.encode())])
                idx = np.sort(rng.choice(table.num_rows, size=sample, replace=False))
                table = table.take(pa.array(idx))
            df = table.to_pandas()
            for c, values in cats.items():
                df[c] = pd.Categorical.from_codes(
                    np.full(len(df), values.index(getattr(run, c)), dtype=np.int32), values
                )
            df["staleness"] = np.int32(run.staleness)
            df["seed"] = np.int32(run.seed)
            frames.append(df)
        if not frames:
            return pd.DataFrame(columns=[*columns, *RUN_COLS])
        return pd.concat(frames, ignore_index=True)

    def _note(self, run: Run, text: str) -> None:
        msg = f"{run.run_id}: {text}"
        if msg not in self.messages:
            self.messages.append(msg)


def read_tokens(run: Run, columns: list[str], note: Callable[[Run, str], None]) -> pa.Table | None:
    """Arrow table of the run's complete-step token rows; bad parts are dropped and noted."""
    parts = [p for p in run.token_parts if p not in run.bad_parts]
    if not parts:  # none written (noted at load time) or all unreadable (noted then)
        return None
    cols = list(dict.fromkeys([*columns, "step"]))
    expr = ds.field("step").isin(run.complete_steps)
    try:
        dataset = ds.dataset([str(p) for p in parts], format=_PARQUET)
        missing = [c for c in cols if c not in dataset.schema.names]
        if missing:
            note(run, f"token parts lack columns {missing}; left out of figures needing them")
            return None
        table = dataset.to_table(columns=cols, filter=expr)
    except (pa.ArrowException, OSError, ValueError):
        table = _read_parts_one_by_one(run, parts, cols, note)
    if table is None:
        return None
    return table.select(columns) if "step" not in columns else table


def _read_parts_one_by_one(
    run: Run, parts: list[Path], cols: list[str], note: Callable[[Run, str], None]
) -> pa.Table | None:
    # Slow path, only after the fast scan failed: find which parts are unreadable.
    tables = []
    for p in parts:
        try:
            t = pq.read_table(
                p,
                columns=cols,
                read_dictionary=_DICT_COLS,
                filters=[("step", "in", run.complete_steps)],
            )
        except (pa.ArrowException, OSError, ValueError) as e:
            run.bad_parts.add(p)
            note(
                run,
                f"unreadable token part {p.name} skipped ({type(e).__name__}: "
                f"{str(e).splitlines()[0][:120]})",
            )
            continue
        tables.append(t)
    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="permissive")


# ---------------------------------------------------------------- discovery and metrics


def discover(roots: Iterable[Path]) -> tuple[list[tuple[Path, Path]], list[str]]:
    """(root, dir) of every dir holding run artefacts (metrics.jsonl or status.json)."""
    found, messages = [], []
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            messages.append(f"{root}: not a directory, nothing read from it")
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            # Hidden dirs (.hydra holds another config.yaml) and run internals are no runs.
            dirnames[:] = sorted(
                d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS
            )
            if "metrics.jsonl" in filenames or "status.json" in filenames:
                found.append((root, Path(dirpath)))
                dirnames[:] = []  # a run dir holds no other run dirs
    return found, messages


def read_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Records of a metrics.jsonl; a truncated last line (crash mid-write) is dropped."""
    records, notes = [], []
    lines = path.read_bytes().splitlines()
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            where = "truncated last line dropped" if i == last else f"corrupt line {i + 1} skipped"
            notes.append(f"metrics.jsonl: {where}")
            continue
        if isinstance(rec, dict):
            records.append(rec)
    return records, notes


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def _identity(cfg: dict[str, Any], meta: dict[str, Any], path: Path) -> dict[str, Any] | str:
    """method/staleness/seed/experiment from config, then meta.json, then the path."""

    def get(dotted: str) -> Any:
        node: Any = cfg
        for k in dotted.split("."):
            node = node.get(k) if isinstance(node, dict) else None
        return node

    method = get("method.name") or meta.get("method")
    if not method:
        return "config.yaml has no method.name"
    staleness = (
        get("train.staleness") if get("train.staleness") is not None else meta.get("staleness")
    )
    if staleness is None:
        return "config.yaml has no train.staleness"
    seed = get("seed") if get("seed") is not None else meta.get("seed")
    if seed is None:
        m = re.search(r"seed(\d+)", str(path))
        if not m:
            return "no seed in config.yaml, meta.json or the path"
        seed = m.group(1)
    experiment = get("experiment.name") or meta.get("experiment") or path.parent.parent.name
    return {
        "method": str(method),
        "method_name": str(method),
        "staleness": int(staleness),
        "seed": int(seed),
        "experiment": str(experiment),
    }


def _load_one(root: Path, path: Path) -> tuple[Run, dict[str, pd.DataFrame]] | str:
    """A usable run with its frames, or the reason it is skipped."""
    if not (path / "config.yaml").is_file():
        return "missing config.yaml"
    if not (path / "metrics.jsonl").is_file():
        return "missing metrics.jsonl"
    try:
        cfg = yaml.load((path / "config.yaml").read_text(), Loader=_YAML_LOADER) or {}
    except (OSError, yaml.YAMLError) as e:
        return f"unreadable config.yaml ({type(e).__name__})"
    if not isinstance(cfg, dict):
        return "config.yaml is not a mapping"
    cfg = upgrade_method_layout(cfg)
    meta = _read_json(path / "meta.json") or {}
    ident = _identity(cfg, meta, path)
    if isinstance(ident, str):
        return ident
    status_obj = _read_json(path / "status.json")
    notes: list[str] = []
    if status_obj is None:
        notes.append("no readable status.json")
    status = str((status_obj or {}).get("status", "unknown"))

    records, jnotes = read_jsonl(path / "metrics.jsonl")
    notes += jnotes
    by_kind: dict[str, list[dict[str, Any]]] = {"step": [], "update": [], "eval": []}
    for rec in records:
        if rec.get("kind") in by_kind and rec.get("step") is not None:
            by_kind[rec["kind"]].append(rec)
    # A resumed run may re-log steps after its last checkpoint: the later record wins.
    n_before = sum(map(len, by_kind.values()))
    by_kind["step"] = _last_per_key(by_kind["step"], ("step",))
    by_kind["update"] = _last_per_key(by_kind["update"], ("step", "update"))
    by_kind["eval"] = _last_per_key(by_kind["eval"], ("step",))
    if (dups := n_before - sum(map(len, by_kind.values()))) > 0:
        notes.append(f"{dups} repeated records (resume?); kept the last of each")
    steps = sorted({int(r["step"]) for r in by_kind["step"]})
    if not steps:
        return f"status {status}, no complete step (no kind: step record)"
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

    rel = path.relative_to(root).as_posix()
    run_id = root.name if rel == "." else f"{root.name}/{rel}"
    run = Run(
        run_id=run_id,
        path=path,
        status=status,
        config=cfg,
        complete_steps=steps,
        token_parts=parts,
        notes=notes,
        token_sample_fraction=(meta.get("export") or {}).get("response_fraction"),
        **ident,
    )
    frames = {
        "steps": pd.DataFrame.from_records([r for r in by_kind["step"]]),
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
    # the same cell (every numeric config key) and seed.
    best: dict[tuple[str, int], Run] = {}
    skipped = []
    for r in runs:
        key = (r.cell, r.seed)
        old = best.get(key)
        if old is None:
            best[key] = r
            continue
        keep, drop = (r, old) if len(r.complete_steps) > len(old.complete_steps) else (old, r)
        best[key] = keep
        skipped.append(
            (
                str(drop.path),
                f"duplicate of {keep.run_id} (same config and seed); kept the longer one",
            )
        )
    return list(best.values()), skipped
