"""Run-dir writer: status, metrics.jsonl, per-token Parquet parts, optional wandb.

The format is the contract with `analysis/` (docs/run_dir.md). Everything here is
append-and-flush or write-then-rename, so a killed process leaves a readable run dir.
Reading a run dir back (its status, missing records, the summary) and deciding what a run
does there is src/lifecycle.py's.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from src.run_files import METRICS
from src.run_vocab import now_iso

TOKEN_SCHEMA = pa.schema([
    ("step", pa.int32()), ("update", pa.int16()), ("response_id", pa.int32()),
    ("group_id", pa.int32()), ("position", pa.int16()), ("token_id", pa.int32()),
    ("logp_behavior", pa.float32()), ("logp_sampler", pa.float32()), ("logp", pa.float32()),
    ("ratio", pa.float32()), ("advantage", pa.float32()), ("entropy", pa.float32()),
    ("clip_state", pa.string()), ("in_loss", pa.bool_()), ("c_low", pa.float32()),
    ("c_high", pa.float32()), ("reward", pa.float32()), ("response_length", pa.int16()),
    ("policy_version", pa.int32()), ("lag", pa.int32()),
    # the mismatch correction (src/corrections/): IS weight (NaN: none), rejection's verdict
    ("is_weight", pa.float32()), ("rs_keep", pa.bool_()),
])


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN; undefined metrics are null by contract
    if isinstance(value, np.generic):
        return _jsonable(value.item())
    return value


class RunWriter:
    """Writes one run dir. `resume_at_step` drops rows a checkpoint does not cover."""

    def __init__(self, run_dir: Path, config: dict | None = None, meta: dict | None = None,
                 *, resume_at_step: int | None = None, wandb_run: Any = None):
        self.run_dir = Path(run_dir)
        self.tokens_dir = self.run_dir / "tokens"
        self.tokens_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.run_dir / METRICS  # plain while running; an export gzips it
        self.wandb_run = wandb_run
        self.last_step: int | None = None
        if config is not None:
            import yaml  # omegaconf's dependency; plain YAML keeps config.yaml readable
            atomic_write_text(self.run_dir / "config.yaml", yaml.safe_dump(config, sort_keys=False))
        if meta is not None:
            self.write_meta(meta)
        if resume_at_step is not None:
            self.truncate_to(resume_at_step)
        self._metrics = open(self.metrics_path, "a")  # noqa: SIM115 - lives as long as the run

    def write_meta(self, meta: dict) -> None:
        atomic_write_text(self.run_dir / "meta.json", json.dumps(meta, indent=2, default=str))

    def set_status(self, status: str, error: str | None = None, **extra: Any) -> None:
        record = {"status": status, "error": error, "last_step": self.last_step,
                  "updated": now_iso(), **extra}
        atomic_write_text(self.run_dir / "status.json", json.dumps(record, indent=2))

    def truncate_to(self, next_step: int) -> int:
        """Keep what a checkpoint taken before `next_step` covers; returns lines dropped.

        Step and update records of steps < next_step stay, and eval records labelled
        <= next_step (an eval is labelled by completed steps and runs before the
        checkpoint). next_step -1 drops everything: a fresh start over a crashed run.
        Rewritten atomically, so a crash mid-resume leaves either the old or the new file.
        A partial last line (killed mid-write) is dropped too.
        """
        dropped = 0
        if self.metrics_path.exists():
            kept = []
            for line in self.metrics_path.read_text().splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    dropped += 1
                    continue
                limit = next_step if record.get("kind") == "eval" else next_step - 1
                if record.get("step", -1) <= limit:
                    kept.append(line)
                else:
                    dropped += 1
            atomic_write_text(self.metrics_path, "".join(f"{line}\n" for line in kept))
        for part in self.tokens_dir.glob("step_*.parquet"):
            if int(part.stem.split("_")[1]) >= next_step:
                part.unlink()
        for tmp in self.tokens_dir.glob(".*.tmp"):
            tmp.unlink()
        return dropped

    def _append(self, record: dict) -> None:
        self._metrics.write(json.dumps({k: _jsonable(v) for k, v in record.items()}) + "\n")
        self._metrics.flush()

    def log_update(self, record: dict) -> None:
        self._append({"kind": "update", **record})

    def log_step(self, record: dict) -> None:
        self._append({"kind": "step", **record})
        self.last_step = int(record["step"])
        if self.wandb_run is not None:
            self.wandb_run.log({k: v for k, v in record.items() if isinstance(v, (int, float))},
                               step=int(record["step"]))

    def log_eval(self, record: dict) -> None:
        self._append({"kind": "eval", **record})
        if self.wandb_run is not None:
            self.wandb_run.log({f"eval/{k}": v for k, v in record.items() if k != "step"},
                               step=int(record["step"]))

    def write_tokens(self, step: int, columns: dict[str, np.ndarray]) -> None:
        table = pa.Table.from_pydict(
            {f.name: columns[f.name] for f in TOKEN_SCHEMA}, schema=TOKEN_SCHEMA)
        final = self.tokens_dir / f"step_{step:06d}.parquet"
        tmp = self.tokens_dir / f".{final.name}.tmp"
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, final)

    def close(self) -> None:
        if not self._metrics.closed:
            self._metrics.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None
