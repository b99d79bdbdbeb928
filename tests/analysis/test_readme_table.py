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


def test_a_primary_metric_stated_after_the_runs_is_marked(tmp_path):
    sweeps = tmp_path / "experiments" / "sweeps.yaml"
    sweeps.parent.mkdir()
    sweeps.write_text("early:\n  primary_metric: greedy_accuracy  # declared before the runs\n"
                      "late:\n  description: x\n"
                      "  primary_metric: sampled_accuracy  # stated after the runs: why\n")
    assert not readme_table.primary_stated_after("early", tmp_path)
    assert readme_table.primary_stated_after("late", tmp_path)
    with pytest.raises(LookupError, match="nowhere"):
        readme_table.primary_stated_after("nowhere", tmp_path)
    row = pd.Series({"basis": "sampled (primary): a − b +0.010 ± 0.020 (n=8; 5 of 8 seeds > 0); "
                              "greedy: a − b -0.010 ± 0.030 (n=8; 3 of 8 seeds > 0)", "note": ""})
    late = Line("c", "p", readme_table.TESTBED, "k", sweep="late")
    early = Line("c", "p", readme_table.TESTBED, "k", sweep="early")
    assert readme_table.here(row, late, tmp_path).startswith(
        "sampled (primary, stated after the runs) +0.010 ± 0.020")
    assert readme_table.here(row, early, tmp_path).startswith("sampled (primary) +0.010")


def test_every_line_names_a_sweep_with_a_primary_metric():
    for line in readme_table.LINES:
        assert line.sweep, line.claim
        readme_table.primary_stated_after(line.sweep)  # raises where sweeps.yaml has none
    # testbed_grid's sampled primary was chosen after its runs (sweeps.yaml says so)
    assert readme_table.primary_stated_after("testbed_grid")
    assert not readme_table.primary_stated_after("testbed_batch_control")
