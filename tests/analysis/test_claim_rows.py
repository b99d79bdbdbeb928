"""The claim rows as data: each row's criterion states the reference its test holds, its
accuracy metric is the primary metric its sweeps declared before they ran, and the other
accuracy metric is shown beside it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from analysis.claims import lag, paper, random_reward
from analysis.claims.schema import Band, Cell, Direction, Row, Side, about, band, methods_of

SWEEPS = yaml.safe_load((Path(__file__).resolve().parents[2] / "experiments" / "sweeps.yaml")
                        .read_text())
METRIC = {"final_sampled_acc": "sampled_accuracy", "final_greedy_acc": "greedy_accuracy"}
# The sweeps whose runs each table judges (experiments/sweeps.yaml)
PAPER_SWEEPS = ("main_1x", "main", "testbed_grid")
LAG_SWEEPS = ("lag4", "lag16", "lag64", "corrections", "large_lag", "m2po_authors",
              "decoupled_areal", "large_lag_peers", "guess16", "scenarios", "start_bounds",
              "testbed_lags")
ALL_ROWS = (*paper.ROWS, *lag.ROWS, *random_reward.ROWS)


def test_about_x_is_the_band_x_plus_minus_005_and_a_range_is_itself():
    assert about(0.80) == Band(0.75, 0.85, "~0.8") and about(0.7).low == 0.65
    assert band(0.43, 0.46) == Band(0.43, 0.46, "0.43-0.46")


@pytest.mark.parametrize("row", [r for r in ALL_ROWS if isinstance(r.test, Band)],
                         ids=lambda r: r.key)
def test_a_band_rows_criterion_names_the_band_it_is_judged_on(row):
    assert f"[{row.test.low:g}, {row.test.high:g}]" in row.criterion


@pytest.mark.parametrize("row", [r for r in ALL_ROWS if r.metric], ids=lambda r: r.key)
def test_an_accuracy_row_uses_its_sweeps_primary_metric_and_shows_the_other(row):
    sweeps = LAG_SWEEPS if row in lag.ROWS else PAPER_SWEEPS
    assert {SWEEPS[s]["primary_metric"] for s in sweeps} == {METRIC[row.metric]}
    assert {s.quantity for s in row.sides} == {row.metric}
    if isinstance(row.test, Direction):
        assert row.also and METRIC[row.also] != METRIC[row.metric]


def test_every_sweep_fixes_its_primary_metric():
    """A sweep names the metric its claims are judged on; an update-microscope study
    (`entry: microscope`) names it per claim row, each with its metric and table."""
    for name, s in SWEEPS.items():
        if s.get("entry") == "microscope":
            assert s["primary_metric"] == "per_claim", name
            assert s["claims"] and all(c.get("metric") and c.get("table") for c in s["claims"])
        else:
            assert s.get("primary_metric") in ("greedy_accuracy", "sampled_accuracy",
                                               "entropy_drift"), name


def test_a_figure_draws_the_methods_of_the_rows_that_cite_it():
    rows = (Row("a", "", "Fig. 7", "", "", (Side(Cell("x"), "q"), Side(Cell("p"), "q")),
                Direction(1)),
            Row("b", "", "Fig. 7", "", "", (Side(Cell("y"), "q"), Side(Cell("p"), "q")),
                Direction(1)),
            Row("c", "", "Fig. 2", "", "", (Side(Cell("p"), "q"),), Direction(1)))
    assert methods_of(rows, "Fig. 7") == ("x", "p", "y")
    assert methods_of(paper.ROWS, "Fig. 7") == ("clip_0.8_1.5", "ppo", "clip_0.5_1.2")
    assert methods_of(paper.ROWS, "Fig. 9") == ("bapo", "ppo")


def _cells(rows: list[tuple]) -> pd.DataFrame:
    cols = ["method", "staleness", "seed", "final_sampled_acc", "final_greedy_acc"]
    return pd.DataFrame(rows, columns=cols).assign(suite="s", experiment="e")


def test_both_metrics_are_shown_primary_first_and_the_primary_decides():
    # bapo - ppo by seed: sampled +0.10, +0.11, +0.09 (held); greedy -0.02, 0.00, +0.02
    s = _cells([("bapo", 4, i, 0.40 + d, 0.30 + g) for i, (d, g) in
                enumerate(((0.10, -0.02), (0.11, 0.0), (0.09, 0.02)))]
               + [("ppo", 4, i, 0.40, 0.30) for i in range(3)])
    row = next(r for r in paper.ROWS if r.key == "bapo_beats_ppo_4x")
    c = paper.claims_table(s, (row,)).iloc[0]
    assert c["verdict"] == "held"
    assert c["basis"].startswith("sampled (primary): bapo − ppo +0.100 ± 0.025 (n=3; 3 of 3")
    assert "; greedy: bapo − ppo +0.000 ± 0.050 (n=3; 1 of 3 seeds > 0)" in c["basis"]
    assert c["measured"].startswith("sampled (primary): bapo 0.500")


def test_a_comparison_says_which_of_its_cells_does_not_learn():
    # bapo's gains over step 0: -0.01, +0.01, 0.00 (interval reaches 0); ppo's +0.20, +0.21,
    # +0.19 (wholly above 0): the row names bapo, not ppo
    s = _cells([("bapo", 4, i, 0.40, 0.30) for i in range(3)]
               + [("ppo", 4, i, 0.40 - 0.01 * i, 0.30) for i in range(3)])
    s["gain_sampled_acc"] = [-0.01, 0.01, 0.00, 0.20, 0.21, 0.19]
    row = next(r for r in paper.ROWS if r.key == "bapo_beats_ppo_4x")
    note = paper.claims_table(s, (row,)).iloc[0]["note"]
    half = 4.303 * 0.01 / 3 ** 0.5  # sd 0.01 over three seeds
    assert f"bapo does not learn here: sampled gain over its warm start +0.000 ± {half:.3f} " \
           "(n=3)" in note
    assert "ppo does not learn" not in note


def _ppo_summary(values: dict, metric: str, other: tuple[str, float]) -> list[dict]:
    """Run-summary rows of ppo: `values[experiment]` by seed in `metric`, `other` constant; the
    control (an experiment ending in _b<N>) in a suite of its own, as a report has it."""
    return [{"suite": "control" if "_b" in exp else "grid", "experiment": exp, "method": "ppo",
             "staleness": 4 if exp.endswith("_4x") else 1, "seed": seed, metric: v,
             other[0]: other[1]}
            for exp, by_seed in values.items() for seed, v in enumerate(by_seed)]


def test_the_batch_control_rows_pair_cells_named_by_experiment_across_suites():
    from analysis.claims.batch import batch_claims

    # greedy by seed: 1x 0.40, 0.42, 0.44; 1x_b32 0.35, 0.36, 0.38; 4x 0.30, 0.33, 0.34
    greedy = {"ramble_1x": (0.40, 0.42, 0.44), "ramble_1x_b32": (0.35, 0.36, 0.38),
              "ramble_4x": (0.30, 0.33, 0.34)}
    rows = _ppo_summary(greedy, "final_greedy_acc", other=("final_sampled_acc", 0.3))
    c = batch_claims(pd.DataFrame(rows)).set_index("claim")

    def row(text):
        return c.filter(like=text, axis=0).iloc[0]

    # 4x - 1x_b32 by seed: -0.05, -0.03, -0.04: mean -0.04, sd 0.01, ± 4.303 * 0.01 / sqrt 3
    r = row("equal update size")
    assert r["value"] == pytest.approx(-0.04) and r["verdict"] == "held"
    assert "4x − 1x_b32 -0.040 ± 0.025 (n=3; 3 of 3 seeds < 0)" in r["basis"]
    # 1x_b32 - 1x: -0.05, -0.06, -0.06; 4x - 1x: -0.10, -0.09, -0.10
    assert row("smaller batch")["value"] == pytest.approx(-0.17 / 3)
    assert row("at equal updates: ppo 4x - 1x")["value"] == pytest.approx(-0.29 / 3)
    missing = batch_claims(pd.DataFrame(rows[:6]))  # no 4x
    assert list(missing["verdict"]) == ["no data", "no data", "held"]
    assert "sweep `testbed_batch_control`" in missing["note"].iat[0]
    assert batch_claims(pd.DataFrame(rows).assign(experiment="staleness_4x")).empty


def test_the_pretrained_testbeds_batch_rows_read_its_own_cells_and_primary_metric():
    """smol_1x_b8 is smol_4x's update size (8 responses); its sweep declared sampled accuracy
    the primary metric, so these rows judge sampled, greedy beside it."""
    from analysis.claims.batch import batch_claims

    # sampled by seed: 1x 0.50, 0.60, 0.55; 1x_b8 0.40, 0.42, 0.47; 4x 0.35, 0.40, 0.56
    sampled = {"smol_1x": (0.50, 0.60, 0.55), "smol_1x_b8": (0.40, 0.42, 0.47),
               "smol_4x": (0.35, 0.40, 0.56)}
    rows = _ppo_summary(sampled, "final_sampled_acc", other=("final_greedy_acc", 0.5))
    c = batch_claims(pd.DataFrame(rows))
    assert len(c) == 3 and c["claim"].str.contains("ramble").sum() == 0
    reuse, batch = (c[c["claim"].str.contains(t)].iloc[0]
                    for t in ("equal update size", "smaller batch"))
    # 4x - 1x_b8 by seed: -0.05, -0.02, +0.09: mean 0.02/3, not settled either way
    assert reuse["value"] == pytest.approx(0.02 / 3) and reuse["verdict"] == "not settled"
    assert "ppo 4x - 1x_b8 (8 responses per update, 960 in all, each" in reuse["claim"]
    assert "final sampled accuracy of 4x minus 1x_b8" in reuse["criterion"]
    # 1x_b8 - 1x: -0.10, -0.18, -0.08: mean -0.12, sd 0.0529, ± 4.303 * 0.0529 / sqrt 3 = 0.131
    assert batch["value"] == pytest.approx(-0.12)
    assert "1x_b8 − 1x -0.120 ± 0.131 (n=3; 3 of 3 seeds < 0)" in batch["basis"]
    no_1x = batch_claims(pd.DataFrame(rows[3:]))
    assert list(no_1x["verdict"]) == ["no data", "not settled", "no data"]
    assert "sweep `smol_grid`" in no_1x["note"].iat[0]
