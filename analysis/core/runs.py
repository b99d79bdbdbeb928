"""A run and a set of runs: identity, config, traits, tidy step/update/eval frames, and token
rows read lazily, per run and per figure, with only the columns the figure asks for
(analysis/core/loader.py reads run dirs into these).
"""

from __future__ import annotations

import functools
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

from src.run_vocab import MethodTraits

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
# clip_state as a dictionary column: pandas gets a Categorical, ~10x cheaper than strings.
_DICT_COLS = ["clip_state"]
_PARQUET = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=_DICT_COLS))


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
    # The CPU family whose rounding the run carries (src/_numerics.py numerics_family, from
    # meta.json's fingerprint; "unrecorded" without one): two families differ in the last
    # bits from the first update on, so equal configs and seeds made on two are two runs.
    numerics_family: str = "unrecorded"
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
    # what a report and its figures derive from these runs once (a lag summary): `cached`
    memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def cached(self, key: str, make: Callable[[], Any]) -> Any:
        """`make()`, computed once per RunSet (a subset is another RunSet, with its own)."""
        if key not in self.memo:
            self.memo[key] = make()
        return self.memo[key]

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


