"""The front page stays true: CI runs the README's test command and the claim counts it
quotes are the report's (links: tests/analysis/test_doc_links.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def test_ci_runs_the_readme_test_command():
    blocks = _bash_blocks(README.read_text())
    test_cmd = next(b for b in blocks if "&& python -m pytest" in b)
    ci = (REPO / ".ci" / "run").read_text()
    assert test_cmd in ci.splitlines()


def test_quick_start_installs_torch_first_and_runs_the_main_job():
    blocks = _bash_blocks(README.read_text())
    main = next(b for b in blocks if "python -m src.run" in b and "pip install" in b)
    assert main.index("pip install torch==2.13.0") < main.index("pip install -e .")


def test_readme_stays_a_front_door():
    """At most 150 lines, no bullet over about 300 characters, and the verdict (at most three
    sentences) on the first screen, before the quick start."""
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= 150
    bullets = re.split(r"\n(?=- |\n)", text)
    assert not [b for b in bullets if b.startswith("- ") and len(" ".join(b.split())) > 320]
    verdict = text.index("## Verdict")
    assert len(text[:verdict].splitlines()) < 20 and verdict < text.index("## Quick start")
    body = text[verdict:text.index("## Quick start")].split("\n", 1)[1]
    sentences = [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", " ".join(body.split())) if s]
    assert 1 <= len(sentences) <= 3


def test_quoted_claim_counts_are_the_reports():
    """The README quotes each report's counts after Holm's correction, of the rows that are
    evidence (pilots among them: rows on too few seeds for a verdict), and how many rows
    hold by construction (shown, not counted), in docs/results.md (the README links it)."""
    first_build = pd.read_csv(REPO / "figures" / "claim_counts.csv").set_index("label")
    paper_grid = pd.read_csv(REPO / "figures" / "paper_grid" / "claim_counts.csv").set_index("label")
    testbed = pd.read_csv(REPO / "figures" / "testbed_grid" / "claim_counts.csv").set_index("label")
    text = " ".join((REPO / "docs" / "results.md").read_text().split())

    def quoted(counts: pd.DataFrame, label: str) -> str:
        row = counts.loc[label]
        return (f"{row['held (Holm)']} held, {row['not held (Holm)']} not held, "
                f"{row['not settled (Holm)']} not settled, {row['pilot (Holm)']} pilot of "
                f"{row['total']} after Holm")

    def built(counts: pd.DataFrame, label: str) -> str:
        return f"{counts.loc[label, 'by construction']} by construction"

    assert f"(S1) has {quoted(first_build, 'S1')} ({built(first_build, 'S1')})" in text
    assert f"all four suites have {quoted(first_build, 'all')}" in text
    assert len(first_build.drop(index="all")) == 4  # "all four suites"
    for counts in (paper_grid, testbed):  # their grid's suite (the batch control is another)
        assert (f"has {quoted(counts, 'S1')} ({built(counts, 'S1')}; the other "
                f"{counts.loc['S1', 'no data']}") in text


def test_quoted_results_are_in_the_reports():
    """Every 'mean ± half-width' the README's claims table quotes is in a generated report."""
    rows = [line for line in README.read_text().splitlines()
            if line.startswith("| ") and " ± " in line]
    reports = " ".join(p.read_text() for p in [REPO / "figures" / "REPORT.md",
                                               REPO / "figures" / "paper_grid" / "REPORT.md",
                                               REPO / "figures" / "testbed_grid" / "REPORT.md",
                                               *sorted((REPO / "figures").glob("lag*/REPORT.md")),
                                               REPO / "figures" / "testbed_lags" / "REPORT.md",
                                               REPO / "figures" / "mismatch_grid" / "REPORT.md",
                                               REPO / "figures" / "clip_family" / "REPORT.md"])
    quoted = [m for line in rows for m in re.findall(r"[+-]?\d+\.\d+ ± \d+\.\d+", line)]
    assert quoted, "the README's claims table quotes no interval"
    missing = [q for q in quoted if q not in reports and q.lstrip("+") not in reports]
    assert not missing, f"README quotes numbers no report holds: {missing}"
