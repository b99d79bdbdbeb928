"""Copy finished run dirs into a compact, committable tree (default experiments/results/).

    python experiments/export_results.py [--runs runs] [--out experiments/results]
                                         [--response-fraction 0.2]

Per run it keeps config.yaml and status.json as they are, metrics.jsonl in full (every step,
update and eval record, byte for byte) but gzip-compressed as `metrics.jsonl.gz`, meta.json
with an `export` block added, and the token rows of a seeded sample of whole responses (each
response with all its tokens, in every update that used it) in one Parquet file,
`tokens/sampled.parquet`. Checkpoints are left out. Every reader of a run dir's metrics
(src/run_files.py) reads metrics.jsonl.gz as the plain file, so the analysis loader reads
the result like any run dir, and

    python analysis/make_figures.py --runs experiments/results --out figures

redraws the committed figures. Token-level panels then see the sampled responses only:
shares, medians and scatter shapes are estimates from that sample; every metric and
curve (from the metrics records) is exact.

Why gzip: the records are most of an export (250-400 KB a run) and shrink about 6x; gzip is
written with no file name and mtime 0 in its header, so two exports of one run are
byte-identical. A run in progress writes plain metrics.jsonl (appended line by line, a
crash loses at most a line); roots exported before keep it plain, and both forms read the
same.

Why whole responses rather than single rows: a response keeps its positions together, so
per-response views (length, positions, reward) stay meaningful in the sample.

Size: every clone carries every export, so one sweep's export should take at most about
10 MiB (experiments/README.md lists each root's size). The last line printed is what this
export wrote (the files as written: metrics.jsonl.gz at its compressed size), and how much of
it is token rows; over 10 MiB, one `warning:` line on stderr names the lever,
--response-fraction (most committed roots used 0.02). The metrics are kept whole whatever the
fraction, so the fraction shrinks the token rows only.

Exit code 0 when the runs are exported; 2 with one `config error:` line, as `python -m
src.run`, for bad input: a --response-fraction outside (0, 1], no finished run dir under
--runs, or a finished run dir holding both metrics.jsonl and metrics.jsonl.gz (checked
before anything is written).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # `python experiments/export_results.py` puts only experiments/ there
    sys.path.insert(0, str(REPO))

from src.config_fields import ConfigError, config_exit  # noqa: E402 - exit 2, one line
from src.run_files import metrics_file, write_metrics_gz  # noqa: E402

KEEP_FILES = ("config.yaml", "status.json")  # copied as they are; the metrics are gzipped
SAMPLE_NAME = "sampled.parquet"
EXPORT_BUDGET_MIB = 10  # one sweep's export; every clone carries it (experiments/README.md)


def finished_runs(root: Path) -> list[Path]:
    runs = []
    for status_path in sorted(root.rglob("status.json")):
        try:
            status = json.loads(status_path.read_text()).get("status")
        except (OSError, ValueError):
            status = None
        if status == "finished":
            runs.append(status_path.parent)
        else:
            print(f"skip {status_path.parent}: status {status!r}, not finished", file=sys.stderr)
    return runs


def keep_mask(table: pa.Table, fraction: float, salt: int) -> np.ndarray:
    """Rows of the responses kept: (step, response_id) hashed with a per-run salt.

    A hash rather than an RNG draw so that a response is kept or dropped the same way in
    every update that used it, and a rerun of the export gives the same files.
    """
    step = table["step"].to_numpy().astype(np.uint64)
    rid = table["response_id"].to_numpy().astype(np.uint64)
    key = (step * np.uint64(1_000_003) + rid + np.uint64(salt)) * np.uint64(0x9E3779B97F4A7C15)
    return (key >> np.uint64(40)).astype(np.float64) / float(1 << 24) < fraction


def export_run(src: Path, dst: Path, fraction: float, run_key: str) -> tuple[int, int]:
    if dst.exists():
        shutil.rmtree(dst)
    (dst / "tokens").mkdir(parents=True)
    for name in KEEP_FILES:
        shutil.copy2(src / name, dst / name)
    write_metrics_gz(src, dst)
    parts = sorted((src / "tokens").glob("step_*.parquet"))
    table = pa.concat_tables([pq.read_table(p) for p in parts]) if parts else None
    total = table.num_rows if table is not None else 0
    kept = 0
    if table is not None:
        mask = keep_mask(table, fraction, zlib.crc32(run_key.encode()))
        sample = table.filter(pa.array(mask)).sort_by(
            [
                ("step", "ascending"),
                ("update", "ascending"),
                ("response_id", "ascending"),
                ("position", "ascending"),
            ]
        )
        kept = sample.num_rows
        pq.write_table(
            sample, dst / "tokens" / SAMPLE_NAME, compression="zstd", compression_level=19
        )
    meta = json.loads((src / "meta.json").read_text())
    meta["export"] = {
        "token_rows": "sampled whole responses, tokens/sampled.parquet",
        "response_fraction": fraction,
        "token_rows_source": total,
        "token_rows_kept": kept,
        "checkpoints": "not exported",
        "source_dir": src.relative_to(REPO).as_posix() if src.is_relative_to(REPO) else str(src),
    }
    (dst / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return total, kept


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def report_size(written: list[Path], out: Path, fraction: float) -> None:
    """Print what this export wrote; warn (one stderr line) past the budget of a sweep."""
    size = sum(tree_bytes(d) for d in written) / 2**20
    tokens = sum(tree_bytes(d / "tokens") for d in written) / 2**20
    print(f"{len(written)} runs -> {out}: {size:.1f} MiB written, {tokens:.1f} MiB of it token rows")
    if size > EXPORT_BUDGET_MIB:
        print(f"warning: this export is {size:.1f} MiB, over the {EXPORT_BUDGET_MIB} MiB a sweep's "
              f"export should take; its token rows are {tokens:.1f} MiB: lower "
              f"--response-fraction (now {fraction}) to keep fewer", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=Path, default=REPO / "runs")
    parser.add_argument("--out", type=Path, default=REPO / "experiments" / "results")
    parser.add_argument("--response-fraction", type=float, default=0.2)
    args = parser.parse_args(argv)
    if not 0 < args.response_fraction <= 1:
        config_exit(f"--response-fraction must be in (0, 1], got {args.response_fraction}")
    runs = finished_runs(args.runs)
    if not runs:
        config_exit(f"no finished run dirs under {args.runs}; run a sweep first, or pass "
                    "--runs the folder its runs are in")
    for src in runs:
        try:
            metrics_file(src)  # both forms in one dir: named before anything is written
        except ConfigError as e:
            config_exit(str(e))
    written = []
    for src in runs:
        rel = src.relative_to(args.runs)
        total, kept = export_run(src, args.out / rel, args.response_fraction, rel.as_posix())
        print(f"{rel}: {kept}/{total} token rows")
        written.append(args.out / rel)
    report_size(written, args.out, args.response_fraction)


if __name__ == "__main__":
    main()
