"""The README's claims table is what analysis/reports/readme_table.py makes from the
committed claims data, and its pieces read a row as the reports print it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from analysis.reports import readme_table
from analysis.reports.readme_table import END, START, Line, estimates, fill, verdict

ROOT = Path(__file__).resolve().parents[2]


def test_readme_table_is_the_claims_data():
    text = (ROOT / "README.md").read_text()
    assert fill(text) == text, ("README.md's claims table disagrees with the claims data: "
                                "python -m analysis.reports.readme_table README.md")


def test_every_line_finds_one_judged_row():
    for line in readme_table.LINES:
        row = readme_table.claims_row(line)
        assert row["key"] == line.key and row["verdict"] != "no data"


def test_estimates_put_the_primary_metric_first_without_the_cell_names():
    basis = ("sampled (primary): bapo − ppo -0.037 ± 0.028 (n=8; 2 of 8 seeds > 0); "
             "greedy: bapo − ppo -0.072 ± 0.075 (n=8; 1 of 8 seeds > 0)")
    assert estimates(basis) == ("sampled (primary) -0.037 ± 0.028 (n=8; 2 of 8 seeds > 0); "
                                "greedy -0.072 ± 0.075 (n=8; 1 of 8 seeds > 0)")
    per_level = "2x: 0.699 ± 0.006 (n=8); 4x: 0.725 ± 0.010 (n=8)"
    assert estimates(per_level, "4x") == "0.725 ± 0.010 (n=8) at 4x"
    paired = ("2x: A<0 − A>0 +21.024 ± 0.390 (n=8; 8 of 8 seeds > 0); 4x: A<0 − A>0 "
              "+19.922 ± 0.622 (n=8; 8 of 8 seeds > 0)")
    assert estimates(paired, "4x") == "+19.922 ± 0.622 (n=8; 8 of 8 seeds > 0) at 4x"


def test_verdict_words():
    def row(v, h, built="", seeds=8):
        return pd.Series({"verdict": v, "holm_verdict": h, "by_construction": built,
                          "seeds": seeds})

    assert verdict(row("not held", "not held")) == "not held"
    assert verdict(row("not held", "not settled")) == "not held; not settled after Holm"
    assert verdict(row("held", "held", "why")) == "held by construction, not counted"
    assert verdict(row("pilot", "pilot", seeds=3)) == "pilot (3 seeds)"


def test_fill_needs_its_markers_and_a_line_needs_its_row(tmp_path):
    with pytest.raises(ValueError, match="claims:start"):
        fill("no table here\n")
    assert fill(f"a\n{START}\nold\n{END}\nb\n").startswith(f"a\n{START}\n| claim (paper) |")
    missing = Line("x", "y", readme_table.TESTBED, "no_such_key")
    with pytest.raises(LookupError, match="no_such_key"):
        readme_table.claims_row(missing)
