"""The README's microscope table is what analysis/reports/readme_microscope.py makes from
the microscope report's claims data, and each cell reads its row as written by hand here."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from analysis.reports import readme_microscope
from analysis.reports.readme_microscope import (
    END,
    START,
    expectation_summary,
    fill,
    row_cells,
    verdict_summary,
)

ROOT = Path(__file__).resolve().parents[2]


def test_readme_microscope_table_is_the_claims_data():
    text = (ROOT / "README.md").read_text()
    assert fill(text) == text, ("README.md's microscope table disagrees with "
                                "figures/microscope/claims.csv: "
                                "python -m analysis.reports.readme_table README.md")


def test_every_shown_claim_is_a_row_with_a_known_grain():
    claims = pd.read_csv(ROOT / readme_microscope.CLAIMS).set_index("id")
    for claim_id in readme_microscope.SHOWN:
        assert claims.loc[claim_id, "table"] in readme_microscope.GRAIN, claim_id


def _row(**over) -> pd.Series:
    row = {"id": "E9.x", "claim": "a claim", "paper": "> 0", "table": "branches",
           "mean": -0.00930067, "low": -0.0162859, "high": -0.00364251, "t_low": -0.0565,
           "t_high": 0.0379, "states": 60, "agree": "2 of 2", "verdict": "pilot (2 trunks)",
           "holm_verdict": "pilot (2 trunks)", "expectation": "pending: pilot (2 trunks)",
           "states_needed": 110.85, "trunks_needed": 7.0}
    return pd.Series({**row, **over})


def test_a_row_reads_its_numbers_grain_verdict_and_what_it_would_need():
    assert row_cells(_row()) == ["a claim (E9.x)", "> 0", "one update",
                                 "-0.0093 [-0.0163, -0.00364], 60 states", "[-0.0565, +0.0379]",
                                 "2 of 2", "pilot (2 trunks)", "pending: pilot (2 trunks)", "~111",
                                 "~7"]
    later = row_cells(_row(table="horizons", verdict="held", holm_verdict="not settled",
                           states_needed=math.nan, trunks_needed=math.nan, mean=1.8306,
                           low=1.2542, high=2.3176, t_low=1.04, t_high=2.62,
                           expectation="as expected"))
    assert later[2:] == ["short horizon", "+1.83 [+1.25, +2.32], 60 states", "[+1.04, +2.62]",
                         "2 of 2", "held; not settled after Holm", "as expected", "-", "-"]
    unrun = row_cells(_row(states=0, agree=math.nan, verdict="no data", holm_verdict="no data",
                           t_low=math.nan, t_high=math.nan, states_needed=math.nan,
                           trunks_needed=math.nan, expectation="pending: no data"))
    assert unrun[3:] == ["no data yet", "-", "-", "no data", "pending: no data", "-", "-"]


def test_fill_needs_its_markers_and_a_shown_id_needs_its_row(tmp_path):
    with pytest.raises(ValueError, match="microscope:start"):
        fill("no table here\n")
    assert fill(f"a\n{START}\nold\n{END}\nb\n").startswith(f"a\n{START}\n| claim (paper) |")
    (tmp_path / "figures" / "microscope").mkdir(parents=True)
    pd.DataFrame([_row(id="E1.high_pos")]).to_csv(tmp_path / readme_microscope.CLAIMS, index=False)
    with pytest.raises(LookupError, match="E1.low_neg"):
        readme_microscope.table(tmp_path)


def test_the_summary_counts_each_grains_verdicts_after_holm():
    shown = pd.DataFrame([_row(id=i, holm_verdict=v, table=t) for i, v, t in [
        ("E1.a", "not settled", "branches"), ("E1.b", "held", "branches"),
        ("E2.c", "not settled", "branches"), ("E2.d", "not held", "branches"),
        ("E3.e", "held", "branches"), ("E5.f", "pilot (2 trunks)", "horizons"),
        ("E5.g", "pilot (2 trunks)", "horizons"), ("E5.h", "no data", "horizons")]])
    assert verdict_summary(shown) == ("After Holm, one update (5 rows): 2 held (E1.b, E3.e), "
                                      "1 not held (E2.d), 2 not settled; short horizon (3 rows): "
                                      "2 pilots (2 trunks), 1 no data.")
    assert verdict_summary(shown.iloc[[5]]) == "After Holm, short horizon (1 row): 1 pilot (2 trunks)."


def test_the_expectations_are_counted_by_outcome_never_mixing_not_as_expected_in():
    shown = pd.DataFrame({"expectation": [
        "as expected", "not as expected: mean 0.43 outside [0, 0.1]", "as expected",
        "pending: pilot (2 trunks)", "in prose only", "not as expected: held, expected not settled"]})
    assert expectation_summary(shown) == ("Against the expectations written before the runs: "
                                          "2 as expected, 2 not as expected, 1 pending, "
                                          "1 in prose only.")
