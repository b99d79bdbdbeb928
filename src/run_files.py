"""A run dir's metrics, found and read in one place.

A run writes `metrics.jsonl`, plain text appended and flushed line by line
(src/telemetry.py), so a crash loses at most one line and a resume appends. An export keeps
the same bytes gzip-compressed as `metrics.jsonl.gz` (experiments/export_results.py): every
clone carries every export, the records are most of one, and gzip shrinks them about 6x.
Roots exported before keep the plain file (history cannot shrink; rewriting would only add
to it), so every reader of a run dir's metrics comes here and reads both forms the same.

Plain Python, no torch: analysis/ and the scripts of experiments/ and benchmarks/ import it.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

from src.config_fields import ConfigError

METRICS = "metrics.jsonl"  # what a run writes
METRICS_GZ = "metrics.jsonl.gz"  # what an export keeps
METRICS_NAMES = (METRICS, METRICS_GZ)
EITHER = f"{METRICS} (or {METRICS_GZ})"  # for messages: a run dir holds one of them
GZIP_LEVEL = 9


def has_metrics(run_dir: Path) -> bool:
    """Whether the dir holds a metrics file of either form (both is an error, raised on read)."""
    return any((Path(run_dir) / name).is_file() for name in METRICS_NAMES)


def metrics_file(run_dir: Path) -> Path | None:
    """The run dir's metrics file, plain or gzipped; None when it has neither. A dir holding
    both is a ConfigError: which one holds its records cannot be told."""
    plain, packed = Path(run_dir) / METRICS, Path(run_dir) / METRICS_GZ
    if plain.is_file() and packed.is_file():
        raise ConfigError(f"{run_dir} holds both {METRICS} and {METRICS_GZ}, so which holds its "
                          f"records cannot be told; a run writes only {METRICS} and an export "
                          f"only {METRICS_GZ}: delete the one that is not this dir's records")
    if plain.is_file():
        return plain
    return packed if packed.is_file() else None


def metrics_bytes(run_dir: Path) -> bytes:
    """The metrics file's text as a run wrote it (gunzipped for an export).
    FileNotFoundError naming both forms when the dir has neither."""
    path = metrics_file(run_dir)
    if path is None:
        raise FileNotFoundError(f"{run_dir}: no {EITHER}")
    data = path.read_bytes()
    return gzip.decompress(data) if path.name == METRICS_GZ else data


def metrics_lines(run_dir: Path) -> list[str]:
    """The metrics file's lines, as `read_text().splitlines()` gives them for a plain file."""
    return metrics_bytes(run_dir).decode().splitlines()


def metrics_records(run_dir: Path) -> list[dict]:
    """Every record of the metrics file, in order; a line that is not JSON raises."""
    return [json.loads(line) for line in metrics_lines(run_dir) if line.strip()]


def metrics_dirs(root: Path) -> Iterator[Path]:
    """Every dir at or below `root` holding a metrics file of either form, sorted, each once."""
    root = Path(root)
    found = {p.parent for name in METRICS_NAMES for p in root.rglob(name) if p.is_file()}
    yield from sorted(found)


def gzip_bytes(data: bytes) -> bytes:
    """`data` gzipped with no name and mtime 0 in the header: the same input gives the same
    bytes, so two exports of one run are byte-identical."""
    return gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)


def write_metrics_gz(run_dir: Path, out_dir: Path) -> Path:
    """Write `run_dir`'s metrics, whichever form it holds, to `out_dir`/metrics.jsonl.gz."""
    out = Path(out_dir) / METRICS_GZ
    out.write_bytes(gzip_bytes(metrics_bytes(run_dir)))
    return out
