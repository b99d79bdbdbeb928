"""The committed figures/ are what analysis/make_figures.py draws from experiments/results,
figures/paper_grid/ what it draws from experiments/paper_grid, figures/testbed_grid/ what
it draws from experiments/testbed_grid, figures/smol_grid/ what it draws from
experiments/smol_grid, figures/testbed_lags/ what analysis/lag_report.py
draws from experiments/testbed_lags with the grid's ramble_1x and 4x ppo as references, and
figures/lag*/ what it draws from experiments/lag_results*, and figures/mismatch_grid/ what
analysis/mismatch_report.py draws from experiments/mismatch_grid with testbed_grid's fp32 cells,
and figures/clip_family/ what analysis/clip_family_report.py draws from its default roots."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis import clip_family_report, lag_report, make_figures, mismatch_report

# regenerations of committed reports and whole runs: the slow tier
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RESULTS, FIGURES = ROOT / "experiments" / "results", ROOT / "figures"
TEXT_OUTPUTS = ["REPORT.md", "results.csv", "claims.csv", "claim_counts.csv", "runs.csv",
                "bapo_search.csv", "batch_claims.csv"]


# figures/lag*/ and figures/testbed_lags/ are lag reports' (analysis/lag_report.py);
# figures/paper_grid/ and figures/testbed_grid/ are their own roots'.
OTHER_ROOTS = ("lag", "paper_grid", "testbed_grid", "testbed_lags", "mismatch_grid", "clip_family",
               "smol_grid", "microscope")
LAG_OUTPUTS = ["REPORT.md", "lag_summary.csv", "lag_claims.csv", "lag_search.csv", "lag_paired.csv",
               "lag_variants.csv"]


@pytest.mark.parametrize("runs, figures", [("experiments/results", FIGURES),
                                           ("experiments/paper_grid", FIGURES / "paper_grid"),
                                           ("experiments/testbed_grid", FIGURES / "testbed_grid"),
                                           ("experiments/smol_grid", FIGURES / "smol_grid")])
def test_committed_report_regenerates_from_committed_results(tmp_path, monkeypatch, runs, figures):
    if not ((ROOT / runs).is_dir() and (figures / "REPORT.md").is_file()):
        pytest.skip(f"no committed results yet ({runs}, {figures / 'REPORT.md'})")
    monkeypatch.chdir(ROOT)  # the report names its --runs argument as given
    code = make_figures.main(["--runs", runs, "--out", str(tmp_path), "--formats", "png"])
    assert code == 0
    written = [n for n in TEXT_OUTPUTS if (tmp_path / n).is_file()]
    assert written == [n for n in TEXT_OUTPUTS if (figures / n).is_file()]
    for name in written:
        assert (tmp_path / name).read_text() == (figures / name).read_text(), name
    # The same figures, every suite's included: a figure now skipped (or new) shows here.
    committed = {str(p.relative_to(figures)) for p in figures.rglob("*.png")
                 if figures != FIGURES or not p.relative_to(figures).parts[0].startswith(OTHER_ROOTS)}
    assert committed and committed == {str(p.relative_to(tmp_path))
                                       for p in tmp_path.rglob("*.png")}
    # Every suite has its dir under the same name.
    def suite_dirs(root: Path) -> set[str]:
        return {p.name for p in (root / "suites").iterdir()} if (root / "suites").is_dir() else set()

    assert suite_dirs(figures) == suite_dirs(tmp_path)


def test_a_gzipped_export_of_a_committed_root_gives_the_same_report(tmp_path, monkeypatch):
    """Exports since keep metrics.jsonl gzipped (experiments/export_results.py); a committed
    root with its metrics gzipped here (the standard library's gzip) must draw the same report."""
    import gzip
    import shutil

    runs, figures = "experiments/paper_grid", FIGURES / "paper_grid"
    if not ((ROOT / runs).is_dir() and (figures / "REPORT.md").is_file()):
        pytest.skip(f"no committed results yet ({runs}, {figures / 'REPORT.md'})")
    shutil.copytree(ROOT / runs, tmp_path / runs)
    plain = sorted((tmp_path / runs).rglob("metrics.jsonl"))
    assert plain
    for path in plain:
        path.with_name("metrics.jsonl.gz").write_bytes(gzip.compress(path.read_bytes(), mtime=0))
        path.unlink()
    monkeypatch.chdir(tmp_path)  # the report names its --runs argument as given
    out = tmp_path / "out"
    assert make_figures.main(["--runs", runs, "--out", str(out), "--formats", "png"]) == 0
    written = [n for n in TEXT_OUTPUTS if (out / n).is_file()]
    assert written == [n for n in TEXT_OUTPUTS if (figures / n).is_file()]
    for name in written:
        assert (out / name).read_text() == (figures / name).read_text(), name


# Each lag report and the roots it was drawn from (experiments/testbed_lags/README.md: a lag
# joins when its 8 seeds are in; 4x ppo is the on-policy reference at the lags' update size).
LAG_REPORTS = {
    "testbed_lags": ["experiments/testbed_lags/ramble_delay_4",
                     "experiments/testbed_lags/ramble_delay_16",
                     "experiments/testbed_grid/ramble_1x", "experiments/testbed_grid/ramble_4x/ppo"],
    "lag": ["experiments/lag_results"],
    "lag_large": ["experiments/lag_results_large"],
    "lag_guess": ["experiments/lag_results_guess"],
}


@pytest.mark.parametrize("report", sorted(LAG_REPORTS))
def test_committed_lag_report_regenerates_from_committed_results(tmp_path, monkeypatch, report):
    figures = FIGURES / report
    if not (figures / "REPORT.md").is_file():
        pytest.skip(f"no committed lag report {report} yet")
    title = (figures / "REPORT.md").read_text().splitlines()[0].removeprefix("# ")
    monkeypatch.chdir(ROOT)
    code = lag_report.main(["--runs", *LAG_REPORTS[report], "--out", str(tmp_path),
                            "--title", title])
    assert code == 0
    written = [n for n in LAG_OUTPUTS if (tmp_path / n).is_file()]
    assert written == [n for n in LAG_OUTPUTS if (figures / n).is_file()]
    for name in written:
        assert (tmp_path / name).read_text() == (figures / name).read_text(), name
    assert {p.name for p in figures.glob("*.png")} == {p.name for p in tmp_path.glob("*.png")}


MISMATCH_OUTPUTS = ["REPORT.md", "claims.csv", "accuracy.csv", "diagnostics.csv", "families.csv",
                    "replication.csv"]


def test_committed_mismatch_report_regenerates_from_committed_results(tmp_path, monkeypatch):
    figures = FIGURES / "mismatch_grid"
    if not (figures / "REPORT.md").is_file():
        pytest.skip("no committed mismatch report yet")
    monkeypatch.chdir(ROOT)  # the report names its --runs arguments as given
    code = mismatch_report.main(["--runs", "experiments/mismatch_grid", "experiments/testbed_grid",
                                 "--out", str(tmp_path)])
    assert code == 0
    written = [n for n in MISMATCH_OUTPUTS if (tmp_path / n).is_file()]
    assert written == [n for n in MISMATCH_OUTPUTS if (figures / n).is_file()]
    for name in written:
        assert (tmp_path / name).read_text() == (figures / name).read_text(), name
    assert {p.name for p in figures.glob("*.png")} == {p.name for p in tmp_path.glob("*.png")}


CLIP_FAMILY_OUTPUTS = ["REPORT.md", "claims.csv", "accuracy.csv", "regime.csv"]


def test_committed_clip_family_report_regenerates_from_committed_results(tmp_path):
    """Its default roots (the family, the mismatch grid's Intel fp32 references, and the AMD
    cells it sets apart), named relative to the repo whatever the working dir."""
    figures = FIGURES / "clip_family"
    if not (figures / "REPORT.md").is_file():
        pytest.skip("no committed clip family report yet")
    assert clip_family_report.main(["--out", str(tmp_path)]) == 0
    written = [n for n in CLIP_FAMILY_OUTPUTS if (tmp_path / n).is_file()]
    assert written == CLIP_FAMILY_OUTPUTS
    for name in written:
        assert (tmp_path / name).read_text() == (figures / name).read_text(), name
    assert {p.name for p in figures.glob("*.png")} == {p.name for p in tmp_path.glob("*.png")}
