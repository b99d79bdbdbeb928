"""Rerun one committed cell and check it against experiments/results, record by record.

    python experiments/verify_cell.py staleness_4x/bapo/seed1 [--results experiments/results]
                                      [--out DIR] [--keep]

The cell is rerun with `python -m src.run experiment=... method=... seed=...` into a
scratch dir (the warm start comes from the cache, or is rebuilt the same way). Then every
metrics.jsonl record must equal the committed one except `time_*` fields (keys the
committed records lack, i.e. telemetry added since, are listed, not compared), and every
committed token row (a sample of whole responses) must equal the rerun's row for the same
(step, update, response_id, position). Runs are deterministic on one machine and library
stack (same seed -> same numbers); another CPU or torch build may differ in the last bits,
which this check reports rather than hides.

    python experiments/verify_cell.py staleness_4x/bapo/seed1 --compare-dir runs/staleness_4x/bapo/seed1

compares a run that already exists with the committed cell, without rerunning it.

Exit codes: 0 identical; 1 a difference (the first few are listed); 2 no such committed
cell (or no run in --compare-dir); 3 the rerun itself failed.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: `src` is importable from the repo root
    sys.path.insert(0, str(REPO))
EXIT_DIFFERS, EXIT_NO_CELL, EXIT_RUN_FAILED = 1, 2, 3
TOKEN_KEY = ["step", "update", "response_id", "position"]


def _records(path: Path) -> list[dict]:
    records = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        records.append({k: v for k, v in rec.items() if not k.startswith("time_")})
    return records


def compare_metrics(committed: Path, rerun: Path, limit: int = 5) -> list[str]:
    """Differences in the committed records' keys. A key only this run writes is telemetry
    added since the cell was committed (`added_metrics`), not a difference in its numbers."""
    a, b = _records(committed / "metrics.jsonl"), _records(rerun / "metrics.jsonl")
    problems = []
    if len(a) != len(b):
        problems.append(f"metrics.jsonl: {len(a)} committed records, {len(b)} in this run")
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        for key in sorted(x):
            if key not in y or x[key] != y[key]:
                problems.append(
                    f"record {i + 1} ({x.get('kind')} step {x.get('step')}) "
                    f"{key}: committed {x.get(key)!r}, this run {y.get(key)!r}"
                )
                if len(problems) >= limit:
                    return problems
    return problems


def added_metrics(committed: Path, rerun: Path) -> list[str]:
    """Record keys this run writes that the committed cell's records do not have."""
    a, b = _records(committed / "metrics.jsonl"), _records(rerun / "metrics.jsonl")
    return sorted({k for x, y in zip(a, b, strict=False) for k in set(y) - set(x)})


def _token_rows(run_dir: Path) -> pa.Table | None:
    # A run dir holds tokens/step_*.parquet; an exported one tokens/sampled.parquet.
    parts = sorted((run_dir / "tokens").glob("*.parquet"))
    return pa.concat_tables([pq.read_table(p) for p in parts]) if parts else None


def compare_tokens(committed: Path, rerun: Path) -> list[str]:
    sample, full = _token_rows(committed), _token_rows(rerun)
    if sample is None:
        return ["the committed cell has no token rows"]
    if full is None:
        return ["this run has no token parts"]
    joined = sample.join(full, keys=TOKEN_KEY, right_suffix="_run", join_type="left outer")
    problems = []
    for name in sample.column_names:
        if name in TOKEN_KEY:
            continue
        left, right = joined[name], joined[f"{name}_run"]
        if right.null_count > left.null_count:
            problems.append(f"tokens: {right.null_count} committed rows missing from this run")
            break
        if not left.equals(right):
            problems.append(f"tokens: column {name} differs")
    return problems


def compare_configs(committed: Path, rerun: Path) -> list[str]:
    """Config keys that can change the numbers and differ (notes: the records decide)."""
    from src.run_dir import config_differences, stored_config

    a, b = stored_config(committed), stored_config(rerun)
    if a is None or b is None:
        return [f"no readable config.yaml in {committed if a is None else rerun}"]
    return [f"{key}: committed {old!r}, this run {new!r}"
            for key, old, new in config_differences(a, b)]


def _fail(code: int, message: str) -> None:
    print(message, file=sys.stderr)
    raise SystemExit(code)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("cell", help="experiment/method/seedN, as under experiments/results")
    parser.add_argument("--results", type=Path, default=REPO / "experiments" / "results")
    parser.add_argument("--out", type=Path, help="rerun dir (default: a temporary dir)")
    parser.add_argument("--keep", action="store_true", help="keep the rerun dir")
    parser.add_argument(
        "--compare-dir",
        type=Path,
        metavar="RUN_DIR",
        help="compare this existing run dir with the committed cell instead of rerunning",
    )
    args = parser.parse_args()
    m = re.fullmatch(r"([^/]+)/([^/]+)/seed(\d+)", args.cell.strip("/"))
    if not m:
        _fail(EXIT_NO_CELL, f"cell must look like staleness_4x/bapo/seed1, got {args.cell!r}")
    committed = args.results / args.cell
    if not (committed / "metrics.jsonl").is_file():
        _fail(EXIT_NO_CELL, f"no committed cell {args.cell}: {committed} has no metrics.jsonl; "
                            f"list the cells with `ls {args.results}/*/*`")
    scratch = None
    if args.compare_dir is not None:
        out = args.compare_dir
        if not (out / "metrics.jsonl").is_file():
            _fail(EXIT_NO_CELL, f"--compare-dir {out} has no metrics.jsonl: not a run dir")
    else:
        scratch = None if args.out else Path(tempfile.mkdtemp(prefix="verify_cell_"))
        out = args.out or scratch / "run"  # a dir src.run makes itself: no resume, no overwrite
        experiment, method, seed = m.groups()
        cmd = [sys.executable, "-m", "src.run", f"experiment={experiment}", f"method={method}",
               f"seed={seed}", f"hydra.run.dir={out}"]
        print("$", " ".join(cmd), flush=True)
        if subprocess.run(cmd, cwd=REPO).returncode != 0:
            _fail(EXIT_RUN_FAILED, f"the rerun of {args.cell} failed (see above); nothing compared")
    for note in compare_configs(committed, out):
        print(f"  note: config differs, {note}")
    added = added_metrics(committed, out)
    if added:
        print(f"  note: this run also logs {', '.join(added)} (telemetry newer than the cell)")
    problems = compare_metrics(committed, out) + compare_tokens(committed, out)
    if scratch is not None and not args.keep:
        shutil.rmtree(scratch)
    if problems:
        print(f"{args.cell}: DIFFERS from the committed run", *problems, sep="\n  ")
        raise SystemExit(EXIT_DIFFERS)
    print(f"{args.cell}: every metric record and every committed token row is identical "
          "(timing fields ignored)")


if __name__ == "__main__":
    main()
