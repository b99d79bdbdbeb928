"""experiments/export_results.py: compact copies of finished runs that the loader still reads."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pandas as pd
import pyarrow.parquet as pq

from analysis.core.loader import load_runs
from analysis.core.summary import run_summary
from analysis.reports.paper import write_report
from experiments import export_results as export
from tests.conftest import REPO, config_error


def test_export_keeps_metrics_whole_and_whole_responses(tmp_path, write_run):
    src_root, out = tmp_path / "runs", tmp_path / "results"
    run = write_run(src_root, "bapo", 4, 0, steps=4, tokens_per_step=1600)
    write_run(src_root, "ppo", 4, 0, status="running")  # not finished: left out
    finished = export.finished_runs(src_root)
    assert finished == [run.path]

    rel = run.path.relative_to(src_root)
    total, kept = export.export_run(run.path, out / rel, 0.25, rel.as_posix())
    dst = out / rel
    for name in ("config.yaml", "status.json"):
        assert (dst / name).read_bytes() == (run.path / name).read_bytes()
    # the records byte for byte, gzipped (tests/analysis/test_export_metrics_gz.py)
    assert gzip.decompress((dst / "metrics.jsonl.gz").read_bytes()) == (
        run.path / "metrics.jsonl").read_bytes()
    assert not (dst / "metrics.jsonl").exists()
    meta = json.loads((dst / "meta.json").read_text())
    assert meta["export"]["response_fraction"] == 0.25
    assert (meta["export"]["token_rows_source"], meta["export"]["token_rows_kept"]) == (total, kept)
    assert not (dst / "checkpoints").exists()

    source = run.tokens
    sample = pq.read_table(dst / "tokens" / "sampled.parquet").to_pandas()
    assert total == len(source) and kept == len(sample)
    # Whole responses: each kept (step, response_id) has every row the source has for it,
    # with identical values.
    keys = sample[["step", "response_id"]].drop_duplicates()
    expected = source.merge(keys, on=["step", "response_id"])
    order = ["step", "update", "response_id", "position"]
    pd.testing.assert_frame_equal(
        sample.sort_values(order).reset_index(drop=True),
        expected.sort_values(order).reset_index(drop=True),
        check_dtype=False,
    )
    # 4 steps x 200 responses at 0.25: 200 expected, binomial sd ~12.
    assert 140 <= len(keys) <= 260

    again = tmp_path / "again"
    export.export_run(run.path, again / rel, 0.25, rel.as_posix())
    assert pq.read_table(again / rel / "tokens" / "sampled.parquet").equals(
        pq.read_table(dst / "tokens" / "sampled.parquet")
    )


def test_loader_and_report_read_an_export(tmp_path, write_run):
    src_root, out = tmp_path / "runs", tmp_path / "results"
    run = write_run(src_root, "ppo", 2, 0, steps=4, tokens_per_step=400)
    rel = run.path.relative_to(src_root)
    export.export_run(run.path, out / rel, 0.5, rel.as_posix())
    runs = load_runs([out])
    (loaded,) = runs.runs
    assert loaded.token_sample_fraction == 0.5 and loaded.complete_steps == [0, 1, 2, 3]
    assert len(runs.steps) == len(run.steps) and len(runs.updates) == len(run.updates)
    rows = runs.tokens(["step", "response_id", "logp"])
    kept = pq.read_table(out / rel / "tokens" / "sampled.parquet")
    assert len(rows) == kept.num_rows and 0 < len(rows) < len(run.tokens)

    path, _, _ = write_report(runs, run_summary(runs), tmp_path / "fig", ["results"], [], 2)
    assert "Token rows of 1 of 1 runs are a seeded sample of whole responses" in path.read_text()
    assert "share kept: 0.5" in path.read_text()


def test_no_finished_run_exits_2_with_one_line(tmp_path, write_run, capsys):
    write_run(tmp_path / "runs", "ppo", 4, 0, status="running")  # not finished
    line = config_error(capsys, lambda: export.main(["--runs", str(tmp_path / "runs"),
                                                     "--out", str(tmp_path / "out")]))
    assert line == (f"no finished run dirs under {tmp_path / 'runs'}; run a sweep first, or "
                    "pass --runs the folder its runs are in")
    assert not (tmp_path / "out").exists()


def test_the_script_exits_2_on_bad_input(tmp_path):
    # as run from the shell: its own sys.path, the exit code the shell sees
    proc = subprocess.run([sys.executable, "experiments/export_results.py", "--runs",
                           str(tmp_path), "--response-fraction", "0"], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "config error: --response-fraction must be in (0, 1], got 0.0\n"


def _mib(root) -> float:
    """Bytes of every file under root, in MiB, counted here rather than by the script."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 2**20


def test_the_size_of_an_export_is_printed_and_over_budget_warned(tmp_path, write_run, capsys,
                                                                 monkeypatch):
    write_run(tmp_path / "runs", "bapo", 4, 0, steps=4, tokens_per_step=1600)
    write_run(tmp_path / "runs", "ppo", 4, 0, steps=4, tokens_per_step=1600)
    argv = ["--runs", str(tmp_path / "runs"), "--response-fraction", "0.5"]

    export.main([*argv, "--out", str(tmp_path / "within")])  # a tiny export: under 10 MiB
    out, err = capsys.readouterr()
    within = tmp_path / "within"
    size, tokens = _mib(within), sum(_mib(d) for d in within.rglob("tokens"))
    assert 0 < tokens < size < 10
    assert out.splitlines()[-1] == (f"2 runs -> {within}: {size:.1f} MiB written, "
                                    f"{tokens:.1f} MiB of it token rows")
    assert err == ""

    # The same export against a budget it exceeds: one stderr line naming the lever.
    monkeypatch.setattr(export, "EXPORT_BUDGET_MIB", size / 2)
    export.main([*argv, "--out", str(tmp_path / "over")])
    _, err = capsys.readouterr()
    assert _mib(tmp_path / "over") == size  # the same files, so the same size
    assert err == (f"warning: this export is {size:.1f} MiB, over the {size / 2} MiB a sweep's "
                   f"export should take; its token rows are {tokens:.1f} MiB: lower "
                   "--response-fraction (now 0.5) to keep fewer\n")


def test_the_size_counts_this_exports_runs_not_what_out_held_before(tmp_path, write_run, capsys):
    out = tmp_path / "out"
    (out / "older").mkdir(parents=True)
    (out / "older" / "metrics.jsonl").write_bytes(b"x" * (11 * 2**20))  # an older export, 11 MiB
    write_run(tmp_path / "runs", "ppo", 4, 0, steps=2, tokens_per_step=400)
    export.main(["--runs", str(tmp_path / "runs"), "--out", str(out)])
    printed, err = capsys.readouterr()
    new = _mib(out) - 11
    assert printed.splitlines()[-1].startswith(f"1 runs -> {out}: {new:.1f} MiB written")
    assert err == ""  # 11 MiB were there before; this export alone is far under 10 MiB
