"""Docs quote the report: generated blocks filled from its CSVs, and one-seed cells apart."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from analysis import make_figures
from analysis.reports.doc_blocks import BLOCK, fill

ROOT = Path(__file__).resolve().parents[2]
DOCS_WITH_BLOCKS = [p for p in sorted((ROOT / "docs").glob("*.md")) if BLOCK.search(p.read_text())]


def _report(tmp_path: Path) -> Path:
    """A hand-made report dir: one suite S1 with two claims, two cells, one search row."""
    out = tmp_path / "rep"
    out.mkdir()
    suite = "grid"
    pd.DataFrame([{"label": "S1", "suite": suite, "held": 1, "not held": 0, "not settled": 1,
                   "pilot": 1, "no data": 0, "total": 3, "held (Holm)": 0, "not held (Holm)": 0,
                   "not settled (Holm)": 2, "pilot (Holm)": 1, "no data (Holm)": 0}]).to_csv(
        out / "claim_counts.csv", index=False)
    pd.DataFrame([
        {"suite": suite, "claim": "a rises", "paper": "up", "basis": "+0.1 ± 0.05 (n=3)",
         "verdict": "held", "p": 0.04, "holm_p": 0.08, "tests": 2, "holm_verdict": "not settled",
         "seeds": 8, "seeds_needed": "no paper value"},
        {"suite": suite, "claim": "b falls", "paper": "down", "basis": "-0.1 ± 0.5 (n=3)",
         "verdict": "not settled", "p": 0.6, "holm_p": 0.6, "tests": 2,
         "holm_verdict": "not settled", "seeds": 8, "seeds_needed": "—"},
        {"suite": suite, "claim": "c beats d", "paper": "62 vs 54", "basis": "+0.1 ± 0.2 (n=3)",
         "verdict": "pilot", "p": 0.3, "holm_p": None, "tests": 2, "holm_verdict": "pilot",
         "seeds": 3, "seeds_needed": "9 (5-189)"},
    ]).to_csv(out / "claims.csv", index=False)
    pd.DataFrame([
        {"suite": suite, "experiment": "e4", "method": "ppo", "staleness": 4,
         "metric": "final_sampled_acc", "mean": 0.3, "ci_low": 0.25, "ci_high": 0.35, "n": 3},
        {"suite": suite, "experiment": "e4", "method": "ppo", "staleness": 4,
         "metric": "clip_frac", "mean": 0.0, "ci_low": 0.0, "ci_high": 0.0, "n": 3},
    ]).to_csv(out / "results.csv", index=False)
    return out


def test_blocks_are_filled_from_the_reports_csvs(tmp_path):
    _report(tmp_path)
    doc = ("intro\n<!-- generated: claims (rep) -->\nstale text\n<!-- /generated: claims -->\n"
           "<!-- generated: results (rep) -->\n<!-- /generated: results -->\nend\n")
    got = fill(doc, tmp_path)
    assert got.startswith("intro\n<!-- generated: claims (rep) -->\n3 claims counted (suite S1 of the "
                          "report): 1 held, 1 not settled, 1 pilot; after Holm's correction over the "
                          "2 tested rows: 2 not settled, 1 pilot.\n")
    assert "stale text" not in got and got.endswith("<!-- /generated: results -->\nend\n")
    assert ("| a rises | up | +0.1 ± 0.05 (n=3) | held | not settled (p 0.040, Holm 0.080) | "
            "no paper value |") in got
    assert ("| c beats d | 62 vs 54 | +0.1 ± 0.2 (n=3) | pilot (3 seeds) | pilot (3 seeds) | "
            "9 (5-189) |") in got
    # the results block: mean ± half-width, and no interval where the seeds had no spread
    assert "| ppo | 4x | 0.300 ± 0.050 (n=3) | 0.000 (n=3; every seed equal: no interval) |" in got
    assert fill(got, tmp_path) == got  # filling again changes nothing
    # only the blocks of one report dir, when asked
    assert fill(doc, tmp_path, only=tmp_path / "other") == doc


@pytest.mark.skipif(not DOCS_WITH_BLOCKS, reason="no doc has generated blocks")
@pytest.mark.parametrize("doc", DOCS_WITH_BLOCKS, ids=lambda p: p.name)
def test_committed_docs_quote_the_committed_reports(doc):
    text = doc.read_text()
    assert fill(text, ROOT) == text, (f"{doc.name} is stale: python analysis/reports/doc_blocks.py "
                                      f"{doc.relative_to(ROOT)}")


def test_a_one_seed_cell_beside_three_seed_cells_is_apart_from_the_report(tmp_path, write_run):
    runs = tmp_path / "runs"
    for seed in range(3):
        for method in ("ppo", "bapo"):
            write_run(runs, method, 2, seed, steps=2)
    write_run(runs, "clip_higher", 2, 0, steps=2)  # a pilot: one seed
    out = tmp_path / "figs"
    assert make_figures.main(["--runs", str(runs), "--out", str(out), "--only", "fig11",
                              "--formats", "png", "--dpi", "30"]) == 0
    text = (out / "REPORT.md").read_text()
    main, apart = text.split("## One-seed cells, apart from the sweeps")
    assert "clip_higher" not in main.split("## Runs")[1] and "| clip_higher | 2x |" in apart
    assert "clip_higher" not in set(pd.read_csv(out / "results.csv")["method"])
