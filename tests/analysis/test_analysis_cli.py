"""make_figures as a script and as a function: what it made, what it skipped and why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from analysis import make_figures

ROOT = Path(__file__).resolve().parents[2]


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
    assert make_figures.main(["--runs", str(tmp_path / "empty"), "--out", str(tmp_path)]) == 1
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
