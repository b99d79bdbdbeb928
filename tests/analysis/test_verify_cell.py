"""experiments/verify_cell.py's comparison: identical runs pass, any changed number is named."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from experiments import export_results as export
from experiments import verify_cell as verify

ROOT = Path(__file__).resolve().parents[2]


def test_compare_finds_nothing_on_a_rerun_and_names_each_change(tmp_path, write_run):
    run = write_run(tmp_path / "runs", "bapo", 4, 0, steps=3, tokens_per_step=320)
    committed = tmp_path / "results" / "cell"
    export.export_run(run.path, committed, 0.5, "cell")

    rerun = tmp_path / "rerun"
    shutil.copytree(run.path, rerun)
    # Timings differ between runs and are ignored.
    lines = [json.loads(x) for x in (rerun / "metrics.jsonl").read_text().splitlines()]
    for rec in lines:
        if rec["kind"] == "update":
            rec["time_update_s"] = 123.0
    (rerun / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert verify.compare_metrics(committed, rerun) == []
    assert verify.compare_tokens(committed, rerun) == []
    assert verify.compare_tokens(run.path, rerun) == []  # a plain run dir as the reference
    # A key the committed records lack is newer telemetry: named, not a difference.
    for rec in lines:
        rec["masked_frac"] = 0.0
    (rerun / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert verify.compare_metrics(committed, rerun) == []
    assert verify.added_metrics(committed, rerun) == ["masked_frac"]

    lines[3]["grad_norm"] = 0.5 if lines[3].get("grad_norm") != 0.5 else 0.25
    (rerun / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines[:-1]))
    problems = verify.compare_metrics(committed, rerun)
    assert problems[0] == (
        f"metrics.jsonl: {len(lines)} committed records, {len(lines) - 1} in this run"
    )
    assert problems[1].startswith("record 4 (") and "grad_norm" in problems[1]

    part = rerun / "tokens" / "step_000001.parquet"
    table = pq.read_table(part)
    entropy = pc.add(table["entropy"], 1e-3).cast(table.schema.field("entropy").type)
    table = table.set_column(table.schema.get_field_index("entropy"), "entropy", entropy)
    pq.write_table(table, part)
    assert verify.compare_tokens(committed, rerun) == ["tokens: column entropy differs"]
    part.unlink()
    assert "committed rows missing from this run" in verify.compare_tokens(committed, rerun)[0]


def _cli(*args):
    return subprocess.run([sys.executable, str(ROOT / "experiments" / "verify_cell.py"), *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_exit_codes_tell_a_missing_cell_from_a_difference(tmp_path, write_run):
    run = write_run(tmp_path / "runs", "bapo", 4, 0, steps=3, tokens_per_step=320)
    results = tmp_path / "results"
    export.export_run(run.path, results / "staleness_4x" / "bapo" / "seed0", 0.5, "cell")
    cell = ["staleness_4x/bapo/seed0", "--results", str(results)]

    same = _cli(*cell, "--compare-dir", str(run.path))
    assert same.returncode == 0, same.stderr
    assert "every metric record and every committed token row is identical" in same.stdout

    # Timings differ between any two runs and are ignored; a number is not.
    changed = tmp_path / "changed"
    shutil.copytree(run.path, changed)
    lines = [json.loads(x) for x in (changed / "metrics.jsonl").read_text().splitlines()]
    for rec in lines:
        if rec["kind"] == "update":
            rec["time_update_s"] = 99.0
    (changed / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert _cli(*cell, "--compare-dir", str(changed)).returncode == 0
    lines[2]["loss"] = lines[2]["loss"] + 1.0
    (changed / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    differs = _cli(*cell, "--compare-dir", str(changed))
    assert differs.returncode == 1 and "DIFFERS" in differs.stdout and "loss" in differs.stdout

    missing = _cli("staleness_4x/bapo/seed7", "--results", str(results))
    assert missing.returncode == 2 and "no committed cell staleness_4x/bapo/seed7" in missing.stderr
    assert _cli("nonsense", "--results", str(results)).returncode == 2
    no_run = _cli(*cell, "--compare-dir", str(tmp_path / "nowhere"))
    assert no_run.returncode == 2 and "not a run dir" in no_run.stderr


def test_a_rerun_that_cannot_start_is_its_own_exit_code(tmp_path, write_run):
    run = write_run(tmp_path / "runs", "bapo", 4, 0, steps=3, tokens_per_step=320)
    results = tmp_path / "results"
    export.export_run(run.path, results / "staleness_4x" / "bapo" / "seed0", 0.5, "cell")
    # --out holds a run made with another config: src.run refuses it (exit 2) before any
    # work, so there is nothing to compare.
    failed = _cli("staleness_4x/bapo/seed0", "--results", str(results), "--out", str(run.path))
    assert failed.returncode == 3, failed.stderr[-2000:]
    assert "holds a run made with another config" in failed.stderr
    assert "the rerun of staleness_4x/bapo/seed0 failed" in failed.stderr
