"""Each microscope claim against its expectation: analysis/claims/microscope_expect.py.

The judged tables are written by hand, so every outcome below is read off its own rows."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from analysis.claims.microscope import Claim
from analysis.claims.microscope_expect import judge_expectations, unchecked_clauses, validate
from tests.conftest import REPO


def _judged(rows: list[tuple[str, str, float]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["id", "holm_verdict", "mean"])


def test_a_verdict_check_passes_only_on_the_same_final_verdict():
    judged = _judged([("A", "held", -0.004), ("B", "not settled", 0.001), ("C", "not held", 0.002)])
    checks = {i: {"verdict": "held"} for i in "ABC"}
    assert list(judge_expectations(judged, checks)) == [
        "as expected", "not as expected: not settled, expected held",
        "not as expected: not held, expected held"]


def test_a_range_includes_its_ends_and_names_the_mean_outside_it():
    judged = _judged([("A", "measured", 0.05), ("B", "measured", 0.01), ("C", "measured", 0.43)])
    checks = {i: {"range": [0.01, 0.05]} for i in "ABC"}
    assert list(judge_expectations(judged, checks)) == [
        "as expected", "as expected", "not as expected: mean 0.43 outside [0.01, 0.05]"]


def test_every_failed_part_is_named_not_only_the_first():
    judged = _judged([("E5", "held", 0.08)])
    check = {"E5": {"range": [-0.03, 0.03], "verdict": "not settled"}}
    assert judge_expectations(judged, check).iloc[0] == (
        "not as expected: held, expected not settled; mean 0.08 outside [-0.03, 0.03]")


def test_orders_against_other_rows():
    judged = _judged([("small", "held", -0.0004), ("a", "held", -0.004), ("b", "held", 0.0003),
                      ("b32", "held", 0.01), ("b8", "held", 0.02)])
    checks = {"small": {"smallest_of": ["a", "b"]}, "b32": {"larger_than": "b8"}}
    got = judge_expectations(judged, checks)
    # |-0.0004| is below 0.004 but not below 0.0003; 0.01 is not above 0.02
    assert got.iloc[0] == "not as expected: |mean| 0.0004 not below b's 0.0003"
    assert got.iloc[3] == "not as expected: mean 0.01 not above b8's 0.02"
    assert list(got.iloc[[1, 2, 4]]) == ["in prose only"] * 3


def test_a_row_waits_for_its_own_verdict_and_for_every_row_it_refers_to():
    judged = _judged([("A", "pilot (2 trunks)", 0.2), ("B", "no data", float("nan")),
                      ("C", "held", 0.1)])
    checks = {"A": {"range": [0, 0.1]}, "B": {"verdict": "held"}, "C": {"larger_than": "A"}}
    assert list(judge_expectations(judged, checks)) == [
        "pending: pilot (2 trunks)", "pending: no data", "pending: A is pilot (2 trunks)"]


def test_an_unchecked_clause_alone_is_prose_and_is_listed():
    judged = _judged([("A", "held", 0.1)])
    checks = {"A": {"unchecked": "small"}}
    assert judge_expectations(judged, checks).iloc[0] == "in prose only"
    assert unchecked_clauses(checks) == ["- A: small"]


@pytest.mark.parametrize(("check", "names"), [
    ({"verdit": "held"}, "unknown key"),
    ({"verdict": "settled"}, "'settled' is not one of"),
    ({"range": [0.3, 0.05]}, "low <= high"),
    ({"range": 0.1}, "[low, high]"),
    ({"larger_than": "E9"}, "refers to no claim ['E9']"),
    ({"smallest_of": ["A", "E9"]}, "refers to no claim ['E9']"),
])
def test_a_malformed_check_is_refused_naming_what_is_wrong(check, names):
    with pytest.raises(ValueError, match="expect_check") as err:
        validate({"A": check}, {"A"})
    assert names in str(err.value)


def test_every_committed_study_transcribes_every_claims_expectation():
    sweeps = yaml.safe_load((REPO / "experiments/sweeps.yaml").read_text())
    studies = {name: e for name, e in sweeps.items() if e.get("entry") == "microscope"}
    assert {"microscope_smol", "microscope_smol_early"} <= set(studies)
    for study in studies.values():
        [Claim.from_entry(c) for c in study["claims"]]  # each a well-formed claim row
        checks = {c["id"]: c["expect_check"] for c in study["claims"]}  # KeyError: a row without one
        validate(checks, set(checks))


def test_once_the_study_is_complete_a_pilot_is_judged_as_it_stands():
    judged = _judged([("A", "pilot (2 trunks)", 0.2), ("B", "no data", float("nan")),
                      ("C", "measured", 0.1), ("D", "pilot (2 trunks)", 0.04),
                      ("E", "held", 0.3)])
    checks = {"A": {"verdict": "held", "larger_than": "C"}, "B": {"verdict": "held"},
              "C": {"range": [0, 0.05]}, "D": {"range": [0.01, 0.05], "larger_than": "C"},
              "E": {"larger_than": "B"}}
    got = list(judge_expectations(judged, checks, study_complete=True))
    # A: expected held, ends a pilot (a miss) though 0.2 > 0.1; B: nothing measured; C: 0.1 is
    # outside [0, 0.05]; D: 0.04 in its range but not above C's 0.1; E: its reference is empty
    assert got == ["not as expected: pilot (2 trunks) at the study's end, expected held",
                   "not as expected: no data at the study's end (B)",
                   "not as expected: mean 0.1 outside [0, 0.05]",
                   "not as expected: mean 0.04 not above C's 0.1",
                   "not as expected: no data at the study's end (B)"]
    # the same rows before the study is complete: every row touching a pilot or no data waits
    assert list(judge_expectations(judged, checks)) == [
        "pending: pilot (2 trunks)", "pending: no data", "not as expected: mean 0.1 outside [0, 0.05]",
        "pending: pilot (2 trunks)", "pending: B is no data"]
