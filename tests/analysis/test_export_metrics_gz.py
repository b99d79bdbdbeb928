"""An export keeps metrics.jsonl gzipped as metrics.jsonl.gz, and every reader reads it as the
plain file (src/run_files.py). Expectations are computed here with the standard library's
gzip and json, not through src/run_files.py."""

from __future__ import annotations

import gzip
import json
import os
import shutil

import pytest
import yaml

from analysis.core.loader import load_runs
from analysis.reports import run_rows
from experiments import export_results as export
from experiments import verify_cell as verify
from src import committed, lifecycle
from src.config_fields import ConfigError
from src.run_files import has_metrics, metrics_bytes, metrics_file, metrics_records
from tests.conftest import config_error

BOTH = "holds both metrics.jsonl and metrics.jsonl.gz"


def _export(run, out, fraction=0.5):
    rel = run.path.relative_to(run.path.parents[2])
    export.export_run(run.path, out / rel, fraction, rel.as_posix())
    return out / rel


def _parsed(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def _files(root) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _gzipped_copy(run_dir, root, copy_root):
    """The run dir (under `root`) copied to the same place under `copy_root`, its
    metrics.jsonl replaced by a gzip of it made here."""
    dst = copy_root / run_dir.relative_to(root)
    shutil.copytree(run_dir, dst)
    plain = dst / "metrics.jsonl"
    (dst / "metrics.jsonl.gz").write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()
    return dst


def test_an_export_keeps_every_record_byte_for_byte_gzipped(tmp_path, write_run):
    run = write_run(tmp_path / "runs", "bapo", 4, 0, steps=4, tokens_per_step=320)
    dst = _export(run, tmp_path / "results")
    source = (run.path / "metrics.jsonl").read_bytes()
    packed = (dst / "metrics.jsonl.gz").read_bytes()
    assert not (dst / "metrics.jsonl").exists()
    assert gzip.decompress(packed) == source
    with gzip.open(dst / "metrics.jsonl.gz", "rt") as f:
        records = [json.loads(line) for line in f]
    assert records == _parsed(source.decode())
    assert len(records) == len(run.steps) + len(run.updates) + len(run.evals)
    # the readers give what the run wrote
    assert metrics_records(dst) == records and metrics_bytes(dst) == source
    # RFC 1952 header: FLG bit 3 (FNAME) clear, MTIME (bytes 4-7) zero
    assert packed[:2] == b"\x1f\x8b" and not packed[3] & 0x08 and packed[4:8] == bytes(4)
    assert len(packed) < len(source) / 3


def test_two_exports_of_one_run_are_byte_identical(tmp_path, write_run, capsys):
    run = write_run(tmp_path / "runs", "ppo", 4, 0, steps=3, tokens_per_step=320)
    argv = ["--runs", str(tmp_path / "runs"), "--response-fraction", "0.5"]
    export.main([*argv, "--out", str(tmp_path / "first")])
    later = (run.path / "metrics.jsonl").stat().st_mtime + 3600
    os.utime(run.path / "metrics.jsonl", (later, later))  # the source touched in between
    export.main([*argv, "--out", str(tmp_path / "second")])
    capsys.readouterr()
    first, second = _files(tmp_path / "first"), _files(tmp_path / "second")
    assert any(name.endswith("/metrics.jsonl.gz") for name in first)
    assert first == second


def test_a_gzipped_run_dir_reads_as_the_plain_one(tmp_path, write_run):
    plain = write_run(tmp_path / "a" / "runs", "bapo", 4, 0, steps=4, evals_every=1).path
    packed = _gzipped_copy(plain, tmp_path / "a" / "runs", tmp_path / "b" / "runs")
    a, b = load_runs([tmp_path / "a" / "runs"]), load_runs([tmp_path / "b" / "runs"])
    assert [r.run_id for r in a.runs] == [r.run_id for r in b.runs] and len(a.runs) == 1
    assert a.runs[0].complete_steps == b.runs[0].complete_steps == [0, 1, 2, 3]
    for kind in ("steps", "updates", "evals"):
        assert len(getattr(a, kind)) and getattr(a, kind).equals(getattr(b, kind))
    assert run_rows.records(packed) == run_rows.records(plain) == _parsed(
        (plain / "metrics.jsonl").read_text())
    assert run_rows.markdown(run_rows.row(packed)) == run_rows.markdown(run_rows.row(plain))
    # the plain file against itself as the reference: the synthetic records hold NaNs, which
    # compare unequal however they are stored
    assert verify.compare_metrics(packed, plain) == verify.compare_metrics(plain, plain)
    assert verify.compare_metrics(plain, packed) == verify.compare_metrics(plain, plain)
    assert verify.final_greedy(packed) == verify.final_greedy(plain) is not None
    assert verify.find_runs(packed.parents[2]) == [packed]
    assert committed.final_accuracy(packed) == committed.final_accuracy(plain) is not None
    assert lifecycle.missing_records(packed, 4) == (None, False)
    assert lifecycle.missing_records(plain, 4) == (None, False)


def test_a_crashed_runs_cut_line_is_dropped_the_same_when_gzipped(tmp_path, write_run):
    plain = write_run(tmp_path / "a" / "runs", "ppo", 4, 0, steps=3, crash=True).path
    _gzipped_copy(plain, tmp_path / "a" / "runs", tmp_path / "b" / "runs")
    a, b = load_runs([tmp_path / "a" / "runs"]), load_runs([tmp_path / "b" / "runs"])
    assert a.messages == b.messages and any("truncated last line" in m for m in a.messages)
    assert a.updates.equals(b.updates) and a.steps.equals(b.steps)


def test_a_dir_with_both_files_is_a_clear_error_everywhere(tmp_path, write_run, capsys):
    run = write_run(tmp_path / "runs", "ppo", 4, 0, steps=2)
    plain = (run.path / "metrics.jsonl").read_bytes()
    (run.path / "metrics.jsonl.gz").write_bytes(gzip.compress(plain))
    assert has_metrics(run.path)
    with pytest.raises(ConfigError, match=f"{BOTH}.*delete the one that is not"):
        metrics_file(run.path)
    skipped = load_runs([tmp_path / "runs"]).skipped
    assert [(p, BOTH in why) for p, why in skipped] == [(str(run.path), True)]
    with pytest.raises(SystemExit, match=BOTH):
        run_rows.records(run.path)
    with pytest.raises(SystemExit) as exit_:
        verify.resolve_cells([str(run.path)], tmp_path)
    assert exit_.value.code == 2 and BOTH in capsys.readouterr().err
    line = config_error(capsys, lambda: export.main(["--runs", str(tmp_path / "runs"),
                                                     "--out", str(tmp_path / "out")]))
    assert BOTH in line and not (tmp_path / "out").exists()  # nothing written


def test_a_dir_with_neither_file_names_both(tmp_path, write_run):
    run = write_run(tmp_path / "runs", "ppo", 4, 0, steps=2)
    (run.path / "metrics.jsonl").unlink()
    assert metrics_file(run.path) is None and not has_metrics(run.path)
    with pytest.raises(FileNotFoundError, match=r"no metrics.jsonl \(or metrics.jsonl.gz\)"):
        metrics_bytes(run.path)
    assert load_runs([tmp_path / "runs"]).skipped == [
        (str(run.path), "missing metrics.jsonl (or metrics.jsonl.gz)")]
    with pytest.raises(SystemExit, match=r"no metrics.jsonl \(or metrics.jsonl.gz\)"):
        run_rows.records(run.path)


def test_a_microscope_study_exports_its_trunk_gzipped_and_its_report_reads_it(tmp_path, write_run):
    from analysis.reports.microscope import write_report
    from experiments.microscope import run_study
    from tests.analysis.test_microscope_report import CLAIM, _branches

    study = tmp_path / "studies" / "e" / "ppo" / "seed0"
    study.mkdir(parents=True)
    trunk = write_run(tmp_path / "made", "ppo", 4, 0, steps=2, tokens_per_step=160).path
    shutil.move(trunk, study / "trunk")
    (study / "microscope.yaml").write_text(yaml.safe_dump(
        {"settings": {}, "trunk_overrides": ["experiment=e", "seed=0"], "commit": "abc1234"}))
    _branches({"zero": 0.0, "mask:low_pos": 0.2}, seeds=1).to_parquet(study / "branches.parquet")
    run_study.export(tmp_path / "studies", tmp_path / "out")

    exported = tmp_path / "out" / "e" / "ppo" / "seed0"
    assert gzip.decompress((exported / "trunk" / "metrics.jsonl.gz").read_bytes()) == (
        study / "trunk" / "metrics.jsonl").read_bytes()
    assert not (exported / "trunk" / "metrics.jsonl").exists()
    claims = [{**CLAIM, "id": "E1", "arm": "mask:low_pos", "ref": "zero", "direction": "up"}]
    text = write_report([tmp_path / "out"], claims, tmp_path / "fig").read_text()
    assert "1 study from commit(s) abc1234; 12 branched states" in text
