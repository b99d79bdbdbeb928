"""Rerun committed cells and check each against its committed run, record by record.

    python experiments/verify_cell.py experiments/lag_results_large/staleness_1x/ppo/train.threads=1/seed0
    python experiments/verify_cell.py experiments/lag_results_large/delay_64/bapo   # every run below
    python experiments/verify_cell.py RUN_DIR [RUN_DIR ...] [--out DIR] [--keep]
    python experiments/verify_cell.py staleness_4x/bapo/seed1 --results experiments/results

Each committed run dir (a dir with metrics.jsonl, or metrics.jsonl.gz as an export keeps it,
and meta.json; a dir given is searched for them) is rerun with the command that made it:
`python -m src.run` with the overrides its meta.json records, in the numerics mode it records
(src/_numerics.py), into a scratch dir (never into committed results). Before each rerun it
prints the command as a user would type it, how long the committed run took, and, when the
cell was made on another numerics family than this machine's, that the numbers will land in
the seeds' interval, not bit for bit.
Then every metrics record must equal the committed one except `time_*` fields (keys
the committed records lack, i.e. telemetry added since, are listed, not compared), and
every committed token row (a sample of whole responses) must equal the rerun's row for the
same (step, update, response_id, position). The verdict per run:

- bit-identical: every record and every committed token row is equal (exit 0); a rerun
  whose only differences are the sampler's own log-probs (`sampler_logp_gap`, the token
  column `logp_sampler`: a diagnostic that training never reads) is named as such, also 0;
- differs, inside the interval: the rerun's final greedy accuracy (the mean of its last
  three evals) lies inside the 95% Student-t interval of the committed seeds of its cell
  (the run dir's `seed*` siblings), the interval the reports show (exit 1);
- differs, outside the interval, or no interval (one committed seed) (exit 4).

Both numerics fingerprints are printed: the committed run's (meta.json `numerics`; runs made
before the mode record none) and the rerun's. With several runs the exit code is the worst
verdict (0 < 1 < 4; a rerun that failed to run is 3; bad input is 2, before any rerun).

    python experiments/verify_cell.py RUN_DIR --compare-dir runs/staleness_4x/bapo/seed0

compares a run that already exists with the committed one, without rerunning it.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
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
from src.config_fields import ConfigError  # noqa: E402 - after the path above
from src.run_files import (  # noqa: E402
    EITHER,
    has_metrics,
    metrics_dirs,
    metrics_file,
    metrics_lines,
)

EXIT_IDENTICAL, EXIT_INSIDE, EXIT_NO_CELL, EXIT_RUN_FAILED, EXIT_OUTSIDE = 0, 1, 2, 3, 4
SEVERITY = (EXIT_IDENTICAL, EXIT_INSIDE, EXIT_OUTSIDE, EXIT_RUN_FAILED)  # mildest first
TOKEN_KEY = ["step", "update", "response_id", "position"]
# The sampler's own log-probs: a diagnostic, never an input to training (the behaviour
# log-probs are recomputed by a forward pass). Between two x86-64 CPUs in the portable mode
# they were the one thing that differed, in the last bits (docs/numerics.md), so a rerun
# that differs only there gets a verdict of its own.
SAMPLER_RECORD_KEYS, SAMPLER_TOKEN_COLUMNS = ("sampler_logp_gap",), ("logp_sampler",)
FINAL_EVALS = 3  # "final" = the mean of the last three evals, as the reports take it
# Overrides that change nothing a run computes and that the rerun sets itself.
_DROPPED_OVERRIDES = ("logger.progress=", "hydra.", "numerics=")


def _records(run_dir: Path) -> list[dict]:
    """The run's metrics records (either form), without their `time_*` fields."""
    records = []
    for line in metrics_lines(run_dir):
        rec = json.loads(line)
        records.append({k: v for k, v in rec.items() if not k.startswith("time_")})
    return records


def compare_metrics(committed: Path, rerun: Path, limit: int = 5,
                    skip: tuple[str, ...] = ()) -> list[str]:
    """Differences in the committed records' keys (but `skip`). A key only this run writes
    is telemetry added since the cell was committed (`added_metrics`), not a difference in
    its numbers."""
    a, b = _records(committed), _records(rerun)
    problems = []
    if len(a) != len(b):
        problems.append(f"metrics.jsonl: {len(a)} committed records, {len(b)} in this run")
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        for key in sorted(set(x) - set(skip)):
            # A key the cell logged as null (not computed) that this run no longer writes is
            # retired telemetry (m2po's `m2` became `m2_harmful`), not a different number.
            if key not in y and x[key] is None:
                continue
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
    a, b = _records(committed), _records(rerun)
    return sorted({k for x, y in zip(a, b, strict=False) for k in set(y) - set(x)})


def _token_rows(run_dir: Path) -> pa.Table | None:
    # A run dir holds tokens/step_*.parquet; an exported one tokens/sampled.parquet.
    parts = sorted((run_dir / "tokens").glob("*.parquet"))
    return pa.concat_tables([pq.read_table(p) for p in parts]) if parts else None


def compare_tokens(committed: Path, rerun: Path, skip: tuple[str, ...] = ()) -> list[str]:
    sample, full = _token_rows(committed), _token_rows(rerun)
    if sample is None:
        return ["the committed cell has no token rows"]
    if full is None:
        return ["this run has no token parts"]
    joined = sample.join(full, keys=TOKEN_KEY, right_suffix="_run", join_type="left outer")
    problems = []
    for name in sample.column_names:
        if name in TOKEN_KEY or name in skip:
            continue
        if name not in full.column_names:  # this run's code predates the column
            problems.append(f"tokens: column {name} is not written by this run")
            continue
        left, right = joined[name], joined[f"{name}_run"]
        if right.null_count > left.null_count:
            problems.append(f"tokens: {right.null_count} committed rows missing from this run")
            break
        if not _same_column(left, right):
            problems.append(f"tokens: column {name} differs")
    return problems


def _same_column(left: pa.ChunkedArray, right: pa.ChunkedArray) -> bool:
    """Equal value by value, NaN equal to NaN: `is_weight` is NaN on every row of a run
    without a correction, and Arrow's equality (NaN != NaN) would call two identical runs
    different."""
    if left.equals(right):
        return True
    if not (pa.types.is_floating(left.type) and left.type == right.type):
        return False
    import numpy as np

    a, b = left.to_numpy(), right.to_numpy()
    return bool(np.array_equal(a, b, equal_nan=True))


def compare_configs(committed: Path, rerun: Path) -> list[str]:
    """Config keys that can change the numbers and differ (notes: the records decide)."""
    from src.run_dir import config_differences, stored_config

    a, b = stored_config(committed), stored_config(rerun)
    if a is None or b is None:
        return [f"no readable config.yaml in {committed if a is None else rerun}"]
    return [f"{key}: committed {old!r}, this run {new!r}"
            for key, old, new in config_differences(a, b)]


# -- the verdict beyond bit-identity ---------------------------------------------------------


def final_greedy(run_dir: Path) -> float | None:
    """The mean greedy accuracy of a run's last `FINAL_EVALS` evals; None without evals."""
    evals = [r["greedy_accuracy"] for r in _records(run_dir)
             if r.get("kind") == "eval" and r.get("greedy_accuracy") is not None]
    tail = evals[-FINAL_EVALS:]
    return sum(tail) / len(tail) if tail else None


def seed_interval(run_dir: Path) -> tuple[float, float, float, int]:
    """(mean, low, high, n) of the final greedy accuracy over the committed seeds of the run's
    cell: its `seed*` siblings, the seeds a report pools."""
    from analysis.core.stats import mean_ci

    finals = [final_greedy(d) for d in sorted(run_dir.parent.glob("seed*")) if has_metrics(d)]
    return mean_ci([f for f in finals if f is not None])


def verdict(committed: Path, rerun: Path, problems: list[str],
            sampler_only: bool = False) -> tuple[int, str]:
    """(exit code, one line) for a rerun against its committed run. `sampler_only`: every
    difference is in the sampler's own log-probs (the problems listed are those)."""
    if not problems:
        return EXIT_IDENTICAL, "bit-identical"
    if sampler_only:
        return EXIT_IDENTICAL, ("bit-identical in every number training uses; only the "
                                "sampler's own log-probs (diagnostic) differ")
    mean, low, high, n = seed_interval(committed)
    value = final_greedy(rerun)
    if value is None:
        return EXIT_OUTSIDE, "differs; the rerun has no eval to place in an interval"
    if n < 2 or math.isnan(low):
        return EXIT_OUTSIDE, (f"differs; final greedy {value:.4f}, and {n} committed seed(s) "
                              "give no interval")
    where = "inside" if low <= value <= high else "outside"
    code = EXIT_INSIDE if where == "inside" else EXIT_OUTSIDE
    return code, (f"differs, {where} the committed seeds' interval: final greedy {value:.4f} "
                  f"against {mean:.4f} [{low:.4f}, {high:.4f}] (n={n}, mean of the last "
                  f"{FINAL_EVALS} evals)")


# -- finding cells and rerunning them --------------------------------------------------------


def find_runs(path: Path) -> list[Path]:
    """The committed run dirs at or below `path` (dirs with a metrics file and meta.json)."""
    if has_metrics(path):
        return [path]
    return [d for d in metrics_dirs(path) if (d / "meta.json").is_file()]


def rerun_command(committed: Path, out: Path) -> list[str]:
    """The command that made the committed run, into `out`, in the mode it records."""
    meta = json.loads((committed / "meta.json").read_text())
    overrides = meta.get("overrides")
    if overrides is None:  # exported before meta recorded them: rebuild from the identity
        overrides = [f"experiment={meta['experiment']}", f"method={meta['method']}",
                     f"seed={meta['seed']}"]
    kept = [o for o in overrides if not o.startswith(_DROPPED_OVERRIDES)]
    mode = (meta.get("numerics") or {}).get("mode", "portable")
    return [sys.executable, "-m", "src.run", *kept, f"numerics={mode}",
            "logger.progress=False", f"hydra.run.dir={out}"]


def describe_fingerprint(fp: dict | None) -> str:
    if not fp:
        return "not recorded (made before the numerics mode existed)"
    return (f"{fp.get('mode')} mode, {fp.get('isa')} kernels, MKL branch {fp.get('mkl_branch')}, "
            f"{fp.get('threads')} thread(s), torch {fp.get('torch')}, MKL {fp.get('mkl')}, "
            f"{fp.get('cpu_model')} [{' '.join(fp.get('cpu_flags') or [])}]")


def family_note(committed_fp: dict | None, here_fp: dict) -> str | None:
    """Said before a rerun whose committed run was made on another numerics family than this
    machine's (src/_numerics.py `numerics_family`): bit-identity is promised only within a
    family (docs/numerics.md). None when the families match, or the cell records none or was
    made in another mode than this machine would rerun it in."""
    from src._numerics import numerics_family

    if not committed_fp or committed_fp.get("mode") != here_fp.get("mode"):
        return None
    made, here = numerics_family(committed_fp), numerics_family(here_fp)
    if made == here:
        return None
    return (f"this cell was made on {made}; this machine is {here}: expect numbers inside the "
            "seeds' interval, not bit-identity (docs/numerics.md)")


def duration_note(committed: Path) -> str:
    """How long the rerun will take, from the committed run's recorded training wall time."""
    try:
        meta = json.loads((committed / "meta.json").read_text())
    except (OSError, json.JSONDecodeError):
        meta = {}
    wall = meta.get("wall_time_s")
    if wall is None:
        return "its committed run records no wall time"
    where = (meta.get("numerics") or {}).get("cpu_model") or meta.get("cpu") or "its machine"
    return (f"about {max(1, round(wall / 60))} min: its committed run trained for {wall:.0f} s "
            f"on {where} with {meta.get('threads', '?')} thread(s), plus start-up and the final "
            "eval; a slower or busier machine takes longer")


def shown_command(cmd: list[str]) -> str:
    """The rerun as a user would type it: `python -m src.run ...`, quoted for the shell."""
    return shlex.join(["python", *cmd[1:]])


def _fingerprint_of(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "meta.json").read_text()).get("numerics")
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def check_one(committed: Path, out: Path, label: str) -> int:
    """Compare the run in `out` with `committed`, print the verdict; its exit code."""
    print(f"{label}:")
    for note in compare_configs(committed, out):
        print(f"  note: config differs, {note}")
    added = added_metrics(committed, out)
    if added:
        print(f"  note: this run also logs {', '.join(added)} (telemetry newer than the cell)")
    print(f"  committed run: {describe_fingerprint(_fingerprint_of(committed))}")
    print(f"  this run:      {describe_fingerprint(_fingerprint_of(out))}")
    problems = compare_metrics(committed, out) + compare_tokens(committed, out)
    training = (compare_metrics(committed, out, skip=SAMPLER_RECORD_KEYS)
                + compare_tokens(committed, out, skip=SAMPLER_TOKEN_COLUMNS))
    code, line = verdict(committed, out, problems, sampler_only=bool(problems) and not training)
    print(f"  verdict: {line}")
    for problem in problems:
        print(f"    {problem}")
    return code


def _fail(code: int, message: str) -> None:
    print(message, file=sys.stderr)
    raise SystemExit(code)


def _one_metrics_file(run_dir: Path) -> Path | None:
    """The run dir's metrics file; a dir holding both forms is bad input (exit 2)."""
    try:
        return metrics_file(run_dir)
    except ConfigError as e:
        _fail(EXIT_NO_CELL, str(e))


def resolve_cells(cells: list[str], results: Path) -> list[Path]:
    """Run dirs for the arguments: paths (a run dir or a dir of them), or the short form
    experiment/method/seedN under `results`. Every argument is checked before any rerun."""
    runs: list[Path] = []
    for cell in cells:
        path = Path(cell)
        if not path.exists() and re.fullmatch(r"[^/]+/[^/]+/seed\d+", cell.strip("/")):
            path = results / cell.strip("/")
            if not has_metrics(path):
                _fail(EXIT_NO_CELL, f"no committed cell {cell}: {path} has no {EITHER}; "
                                    f"list the cells with `ls {results}/*/*`")
        if not path.is_dir():
            _fail(EXIT_NO_CELL, f"{cell}: not a run dir, a dir of run dirs, or a cell like "
                                "staleness_4x/bapo/seed1")
        found = find_runs(path)
        if not found:
            _fail(EXIT_NO_CELL, f"{cell}: no committed run below it (a run dir holds "
                                f"{EITHER} and meta.json)")
        runs.extend(found)
    for run in runs:
        _one_metrics_file(run)
    return runs


def main() -> None:
    from src.pinning import pin_process

    pin_process()  # before torch loads; the rerun pins its own mode (`numerics=` from meta.json)
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("cells", nargs="+", metavar="CELL",
                        help="a committed run dir, a dir of them, or experiment/method/seedN")
    parser.add_argument("--results", type=Path, default=REPO / "experiments" / "results",
                        help="root of the short experiment/method/seedN form")
    parser.add_argument("--out", type=Path, help="rerun dir of a single cell (default: temporary)")
    parser.add_argument("--keep", action="store_true", help="keep the rerun dirs")
    parser.add_argument(
        "--compare-dir",
        type=Path,
        metavar="RUN_DIR",
        help="compare this existing run dir with the committed cell instead of rerunning",
    )
    args = parser.parse_args()
    runs = resolve_cells(args.cells, args.results)
    if (args.out or args.compare_dir) and len(runs) > 1:
        _fail(EXIT_NO_CELL, f"--out and --compare-dir take one cell; {len(runs)} were given")
    if args.out is not None:
        from src.committed import committed_root, runs_path_for

        root = committed_root(args.out)
        if root is not None:  # committed results are read-only to a rerun too
            _fail(EXIT_NO_CELL, f"--out {args.out} lies in committed results ({root}), which a "
                                f"rerun never writes; give --out {runs_path_for(args.out)} (or "
                                "leave it out: a temporary dir)")
    if args.compare_dir is not None and _one_metrics_file(args.compare_dir) is None:
        _fail(EXIT_NO_CELL, f"--compare-dir {args.compare_dir} has no {EITHER}: not a run dir")
    if args.compare_dir is not None:
        from src.lifecycle import read_status

        state = (read_status(args.compare_dir) or {}).get("status", "missing or unreadable")
        if state != "finished":
            # a run still going (or stopped) lacks its last records: its verdict would be wrong
            _fail(EXIT_NO_CELL, f"--compare-dir {args.compare_dir} is not finished (status.json: "
                  f"{state}); let it finish or resume it, then compare")
    scratch = Path(tempfile.mkdtemp(prefix="verify_cell_")) if not (args.out or args.compare_dir) else None
    here_fp = None
    if args.compare_dir is None:
        from src._numerics import fingerprint

        here_fp = fingerprint()  # this process is pinned as its reruns will be (pin_process)
    codes = []
    try:
        for i, committed in enumerate(runs):
            label = str(committed.relative_to(REPO)) if committed.is_relative_to(REPO) else str(committed)
            out = args.compare_dir or args.out or scratch / f"run{i}"
            if args.compare_dir is None:
                cmd = rerun_command(committed, out)
                print(f"rerunning {label}, {duration_note(committed)}")
                note = family_note(_fingerprint_of(committed), here_fp)
                if note:
                    print(f"  note: {note}")
                print(shown_command(cmd), flush=True)
                if subprocess.run(cmd, cwd=REPO).returncode != 0:
                    print(f"the rerun of {label} failed (see above); nothing compared",
                          file=sys.stderr)
                    codes.append(EXIT_RUN_FAILED)
                    continue
            codes.append(check_one(committed, out, label))
    finally:
        if scratch is not None and not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    worst = max(codes, key=SEVERITY.index)
    if len(runs) > 1:
        counts = {c: codes.count(c) for c in SEVERITY if codes.count(c)}
        names = {EXIT_IDENTICAL: "bit-identical", EXIT_INSIDE: "inside the interval",
                 EXIT_OUTSIDE: "outside the interval", EXIT_RUN_FAILED: "failed to run"}
        print(f"{len(runs)} runs: " + ", ".join(f"{n} {names[c]}" for c, n in counts.items()))
    raise SystemExit(worst)


if __name__ == "__main__":
    main()
