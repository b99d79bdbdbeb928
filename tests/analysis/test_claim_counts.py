"""The claim counts (claim_counts.csv, what a README quotes) agree with REPORT.md."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from analysis.claims.rules import VERDICTS
from analysis.reports.claim_counts import ALL, BUILT, claim_counts, counts_in_report

FIGURES = Path(__file__).resolve().parents[2] / "figures"


def test_claim_counts_by_hand():
    claims = pd.DataFrame({"suite": ["x", "x", "x", "y"],
                           "verdict": ["held", "not settled", "held", "not held"],
                           "holm_verdict": ["held", "not settled", "not settled", "not held"]})
    t = claim_counts(claims, {"x": "S1", "y": "S2"}).set_index("label")
    assert t.loc["S1", ["held", "not held", "not settled", "no data", "total"]].tolist() == [2, 0, 1, 0, 3]
    assert t.loc["S1", ["held (Holm)", "not settled (Holm)"]].tolist() == [1, 2]
    assert t.loc[ALL, "total"] == 4 and t.loc[ALL, "not held"] == 1
    assert t.loc[ALL, "not held (Holm)"] == 1 and t.loc[ALL, "held (Holm)"] == 1


def test_run_index_maps_each_dir_to_its_overrides(tmp_path, write_run):
    import json

    from analysis.core.loader import load_runs
    from analysis.reports.run_index import run_index

    run = write_run(tmp_path, "ppo", 4, 1, extra_config={"train.lr": 1e-4})
    meta = json.loads((run.path / "meta.json").read_text())
    meta["overrides"] = ["seed=1", "method=ppo", "experiment=sweep", "train.lr=1e-4"]
    (run.path / "meta.json").write_text(json.dumps(meta))
    runs = load_runs([tmp_path])
    index = run_index(runs, {runs.suites[0]: "S1"})
    row = index.iloc[0]
    assert (row["suite"], row["method"], row["staleness"], row["seed"]) == ("S1", "ppo", 4, 1)
    assert row["overrides"] == "train.lr=1e-4"  # seed, method, experiment have columns
    assert row["dir"].endswith(run.path.relative_to(tmp_path).as_posix())


def test_counts_read_back_from_report_text():
    text = "\n".join(["## Paper claims", "### S1", "", "Verdicts: 5 held, 1 not held, 9 not settled.",
                      "", "After Holm's correction over the 15 tested rows: 2 held, 13 not settled.",
                      "| claim |", "### S2", "Verdicts: 2 not held, 3 pilot, 1 no data."])
    got = counts_in_report(text)
    none = {v: 0 for v in VERDICTS}
    assert got["S1"] == {**none, "held": 5, "not held": 1, "not settled": 9, BUILT: 0}
    assert got["S2"] == {**none, "not held": 2, "pilot": 3, "no data": 1, BUILT: 0}
    holm = counts_in_report(text, holm=True)
    assert holm == {"S1": {**none, "held": 2, "not settled": 13, BUILT: 0}}
    one_suite = ("## Paper claims\n\nVerdicts: 3 held; 2 by construction (shown, not "
                 "counted).\n")
    assert counts_in_report(one_suite) == {"S1": {**none, "held": 3, BUILT: 2}}


@pytest.mark.skipif(not (FIGURES / "claim_counts.csv").is_file(), reason="no committed figures")
def test_committed_counts_match_the_committed_report():
    counts = pd.read_csv(FIGURES / "claim_counts.csv").set_index("label")
    report = (FIGURES / "REPORT.md").read_text()
    in_report = counts_in_report(report)
    suites = counts.drop(index=ALL)
    assert set(in_report) == set(suites.index)
    after_holm = counts_in_report(report, holm=True)
    for label, row in suites.iterrows():
        assert in_report[label] == {**{v: int(row[v]) for v in VERDICTS}, BUILT: int(row[BUILT])}
        assert after_holm[label] == {**{v: int(row[f"{v} (Holm)"]) for v in VERDICTS},
                                     BUILT: int(row[BUILT])}, label
    claims = pd.read_csv(FIGURES / "claims.csv")
    # every claim row is counted once: as evidence (total) or as holding by construction
    assert counts.loc[ALL, "total"] + counts.loc[ALL, BUILT] == len(claims)
    assert sum(sum(c.values()) for c in in_report.values()) == len(claims)
