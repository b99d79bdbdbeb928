"""make_figures as a script and as a function: what it made, what it skipped and why."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from analysis import make_figures

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_script_mode_reports_made_and_skipped(tmp_path, write_run):
    runs = tmp_path / "runs"
    write_run(runs, "ppo", 1, 0, steps=2)
    write_run(runs, "ppo", 2, 0, steps=2)
    bad = write_run(runs, "bapo", 2, 0, steps=2)
    (bad.path / "config.yaml").unlink()
    out = tmp_path / "figs"
    # Run from another cwd: the script must find the `analysis` package by itself.
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "analysis" / "make_figures.py"),
            "--runs",
            str(runs),
            "--out",
            str(out),
            "--only",
            "fig11",
            "fig07",
            "fig08",
            "--dpi",
            "30",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert (out / "fig11_final_accuracy.png").exists() and (
        out / "fig11_final_accuracy.pdf"
    ).exists()
    assert "skipped fig07_asymmetric_clips: no runs named clip_0.8_1.5" in proc.stdout
    assert "skipped fig08_bapo_bounds: no bapo runs" in proc.stdout
    assert "skipped, missing config.yaml" in proc.stdout
    report = (out / "REPORT.md").read_text()
    assert "- skipped `fig08_bapo_bounds`: no bapo runs" in report


def test_main_in_process_and_no_runs(tmp_path, write_run, capsys):
    assert make_figures.main(["--runs", str(tmp_path / "empty"), "--out", str(tmp_path)]) == 2
    assert "nothing to plot" in capsys.readouterr().out
    write_run(tmp_path / "runs", "ppo", 2, 0, steps=2)
    write_run(tmp_path / "runs", "bapo", 2, 0, steps=2, experiment="other")
    rc = make_figures.main(
        [
            "--runs",
            str(tmp_path / "runs"),
            "--out",
            str(tmp_path / "f"),
            "--only",
            "fig11",
            "--formats",
            "png",
            "--experiment",
            "other",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "read 1 runs" in out
    assert (tmp_path / "f" / "fig11_final_accuracy.png").exists()
    assert not (tmp_path / "f" / "fig11_final_accuracy.pdf").exists()


def test_nothing_to_read_exits_2_with_one_clear_line(tmp_path):
    (tmp_path / "empty").mkdir()
    for runs in (tmp_path / "nonexistent", tmp_path / "empty"):
        proc = subprocess.run([sys.executable, str(ROOT / "analysis" / "make_figures.py"),
                               "--runs", str(runs), "--out", str(tmp_path / "out")],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert ("nothing to plot: no usable run dirs "
                "(config.yaml + metrics.jsonl or metrics.jsonl.gz)") in proc.stdout
        assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_out_that_is_a_file_exits_2_without_a_traceback(tmp_path, write_run, capsys):
    write_run(tmp_path / "runs", "ppo", 2, 0, steps=2)
    a_file = tmp_path / "a_file"
    a_file.write_text("keep me")
    for out in (a_file, a_file / "figs"):
        rc = make_figures.main(["--runs", str(tmp_path / "runs"), "--out", str(out)])
        assert rc == 2
        assert capsys.readouterr().err.strip() == (
            f"error: --out {out}: {a_file} is a file, not a dir; give a dir (made if missing)")
    assert a_file.read_text() == "keep me"


def test_a_run_with_a_partial_config_beside_whole_ones_is_noted_and_skipped(tmp_path, write_run,
                                                                             capsys):
    from analysis.core.loader import RUN_SECTIONS, load_runs

    whole = {k: {} for k in RUN_SECTIONS if k not in ("seed", "method", "train")}
    write_run(tmp_path / "runs", "ppo", 2, 0, steps=2, extra_config=whole)
    write_run(tmp_path / "runs", "ppo", 2, 1, steps=2, extra_config=whole)
    partial = write_run(tmp_path / "runs", "ppo", 2, 2, steps=2)  # no device, model, ...
    runs = load_runs([tmp_path / "runs"])
    assert sorted(r.seed for r in runs.runs) == [0, 1]
    assert len(runs.suites) == 1
    why = "partial config.yaml (no device, model, task, rollout, eval), so its cell cannot be told"
    assert runs.skipped == [(str(partial.path), why)]
    assert f"{partial.path}: skipped, {why}" in runs.messages


def test_a_rerun_on_the_same_runs_writes_the_same_bytes(tmp_path, write_run):
    """PDFs and SVGs carry no time of writing (and SVG ids no random salt), so a rerun gives
    every file byte for byte: regenerated figures diff clean against committed ones."""
    for seed in (0, 1):
        write_run(tmp_path / "runs", "ppo", 1, seed)
        write_run(tmp_path / "runs", "ppo", 2, seed)
    out = tmp_path / "figs"
    args = ["--runs", str(tmp_path / "runs"), "--out", str(out), "--only", "fig02", "fig11",
            "--formats", "png", "pdf", "svg", "--dpi", "30"]

    def written() -> dict[str, bytes]:
        return {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*")
                if p.is_file()}

    assert make_figures.main(args) == 0
    first = written()
    assert {f"fig11_final_accuracy.{ext}" for ext in ("png", "pdf", "svg")} <= set(first)
    # A date in the file would differ only across a second's boundary: look for it directly.
    assert all(b"/CreationDate" not in data for name, data in first.items() if name.endswith("pdf"))
    assert all(b"<dc:date>" not in data for name, data in first.items() if name.endswith("svg"))
    time.sleep(1.1)  # past the second a dated file would carry
    assert make_figures.main(args) == 0
    again = written()
    assert sorted(again) == sorted(first)
    assert [name for name in first if again[name] != first[name]] == []


def test_claim_counts_say_which_are_before_and_which_after_holm():
    """Holm turns a settled row whose adjusted p is not below 0.05 into `not settled`; a row
    that holds by construction is in neither count."""
    claims = pd.DataFrame({
        "verdict": ["held", "held", "not held", "not settled", "held"],
        "holm_verdict": ["held", "not settled", "not settled", "not settled", "held"],
        "tests": [4] * 5,
        "by_construction": ["", "", "", "", "the clip makes it so"],
    })
    assert make_figures.claim_count_lines(claims) == [
        "before Holm: 2 held, 1 not held, 1 not settled; 1 by construction (shown, not counted)",
        "after Holm over the suite's 4 tested rows: 1 held, 3 not settled; "
        "1 by construction (shown, not counted)",
    ]


def test_make_figures_prints_both_counts_per_suite(tmp_path, write_run, capsys):
    write_run(tmp_path / "runs", "ppo", 2, 0, steps=2)
    assert make_figures.main(["--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "f"),
                              "--only", "fig11", "--formats", "png", "--dpi", "30"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("claims of suite sweep:")  # the experiment names the suite
    assert lines[at + 1].startswith("  before Holm: ")
    assert lines[at + 2].startswith("  after Holm over the suite's ")


@pytest.mark.parametrize("bad, says", [
    (["--formats", "png", "bmpx"], "argument --formats: invalid choice: 'bmpx' (choose from "),
    (["--dpi", "0"], "argument --dpi: must be a whole number > 0, got '0'"),
    (["--dpi", "1.5"], "argument --dpi: must be a whole number > 0, got '1.5'"),
    (["--last-k", "0"], "argument --last-k: must be a whole number > 0, got '0'"),
    (["--smooth", "-2"], "argument --smooth: must be a whole number > 0, got '-2'"),
])
def test_a_bad_option_is_refused_before_any_work(tmp_path, write_run, capsys, bad, says):
    write_run(tmp_path / "runs", "ppo", 2, 0, steps=2)
    out = tmp_path / "figs"
    with pytest.raises(SystemExit) as exit_:
        make_figures.main(["--runs", str(tmp_path / "runs"), "--out", str(out), *bad])
    assert exit_.value.code == 2
    printed = capsys.readouterr()
    assert printed.out == ""  # not even "read N runs": nothing was started
    assert printed.err.startswith(f"error: {says}") and printed.err.count("\n") == 1
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["runs"]


def test_every_format_matplotlib_writes_is_offered():
    from matplotlib.figure import Figure

    supported = Figure().canvas.get_supported_filetypes()
    assert {"png", "pdf", "svg"} <= set(supported)
    assert make_figures.parse_args(["--formats", *supported]).formats == list(supported)
