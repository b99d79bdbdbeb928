"""The testbed targets judged over seeds: each verdict follows from the t-interval over
seeds, computed here by hand (t_0.975 with 2 degrees of freedom is 4.303)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from experiments.calibration.testbed_judge import (
    check_one_level,
    check_whole_tokens,
    in_range,
    judge,
    merge_rows,
    outputs,
    sampled_beside,
)
from tests.conftest import config_error

T2 = 4.302652729911275  # t_0.975, 2 degrees of freedom


def _half(values: list[float]) -> float:
    return T2 * pd.Series(values).std(ddof=1) / math.sqrt(len(values))


def _rows() -> pd.DataFrame:
    base = {"share_sd": 0.04, "length_ratio": 1.6, "wall_min": 4.5, "threads": 1,
            "moved_reached": math.nan, "band_mass": math.nan, "share_mean": math.nan}
    rows = []
    for seed, (g1, f1, f4, clip) in enumerate([(0.30, 0.44, 0.27, 0.002), (0.25, 0.40, 0.30, 0.003),
                                               (0.20, 0.36, 0.25, 0.001)]):
        rows.append({**base, "cell": "ppo 1x", "seed": seed, "gain": g1, "greedy_final": f1, "clip_frac": 0.0})
        rows.append({**base, "cell": "ppo 4x", "seed": seed, "gain": f4 - 0.14, "greedy_final": f4,
                     "clip_frac": clip})
        rows.append({**base, "cell": "bapo 4x", "seed": seed, "gain": 0.1, "greedy_final": f4,
                     "clip_frac": clip, "share_mean": 0.36 + 0.005 * seed, "band_mass": 0.003,
                     "moved_reached": 0.02})
    return pd.DataFrame(rows)


def test_interval_rules_by_hand():
    verdicts = {row[0][:2]: row[2] for row in judge(_rows())}
    # 1: gains 0.30/0.25/0.20: mean 0.25, half 4.303 * 0.05 / sqrt(3) = 0.124 -> above 0, mean >= 0.10
    assert _half([0.30, 0.25, 0.20]) < 0.25
    assert verdicts["1."] == "met"
    # 2: 4x gains 0.13/0.16/0.11 (interval above 0), 4x - 1x -0.17/-0.10/-0.11 (below 0)
    assert 0.1333 - _half([0.13, 0.16, 0.11]) > 0 and -0.1267 + _half([-0.17, -0.10, -0.11]) < 0
    assert verdicts["2."] == "met"
    # 3: shares 0.360/0.365/0.370: 0.365 +- 0.0124, inside 0.33-0.40 (0.37-0.39 would reach 0.405)
    assert verdicts["3."] == "met"
    assert verdicts["4."] == "met"
    # 5: band mass 0.003 on every seed: a zero-width interval below 0.05
    assert verdicts["5."] == "not met"
    # 6: clip 0.2% +- 0.25%: wholly below 1%
    assert 0.002 + _half([0.002, 0.003, 0.001]) < 0.01
    assert verdicts["6."] == "not met"
    assert verdicts["7."] == "met"


def test_one_seed_settles_nothing_but_the_wall_time():
    rows = _rows()
    verdicts = [v for _, _, v in judge(rows[rows["seed"] == 0])]
    assert verdicts[:6] == ["not settled"] * 6


def test_in_range_needs_the_whole_interval_inside():
    assert in_range(0.34, 0.39, 3, 0.33, 0.40) == "met"
    assert in_range(0.30, 0.39, 3, 0.33, 0.40) == "not settled"
    assert in_range(0.41, 0.45, 3, 0.33, 0.40) == "not met"
    assert in_range(0.34, 0.39, 1, 0.33, 0.40) == "not settled"


def _row(cell: str, seed: int, gain: float, band: float = 0.004) -> dict:
    return {"cell": cell, "pilot": "train.threads=1", "seed": seed, "gain": gain,
            "band_mass": band, "length_ratio": 1.6 if band == band else math.nan}


def test_merge_keeps_rows_whose_runs_are_gone_and_replaces_rows_measured_again():
    kept = pd.DataFrame([_row("ppo 4x", 0, 0.10), _row("ppo 4x", 1, 0.20), _row("ppo 1x", 0, 0.30)])
    measured = pd.DataFrame([_row("ppo 4x", 1, 0.25),    # measured again: replaces the kept row
                             _row("ppo 4x", 3, 0.40)])   # new
    rows = merge_rows(kept, measured)
    assert list(zip(rows["cell"], rows["seed"], rows["gain"], strict=True)) == [
        ("ppo 1x", 0, 0.30), ("ppo 4x", 0, 0.10), ("ppo 4x", 1, 0.25), ("ppo 4x", 3, 0.40)]


def test_merge_prefers_whole_token_rows_over_an_exports_sample():
    nan = math.nan
    kept = pd.DataFrame([_row("bapo 4x", 0, 0.10, band=0.004)])            # from whole rows
    measured = pd.DataFrame([_row("bapo 4x", 0, 0.10, band=nan),           # the export's copy
                             _row("bapo 4x", 3, 0.20, band=nan),           # export, first root...
                             _row("bapo 4x", 3, 0.20, band=0.005)])        # ...runs/, second root
    rows = merge_rows(kept, measured)
    assert rows["seed"].tolist() == [0, 3] and rows["band_mass"].tolist() == [0.004, 0.005]


def test_bapo_without_whole_token_rows_is_refused_with_the_rerun_command(capsys):
    rows = pd.DataFrame([_row("bapo 4x", 0, 0.1), _row("bapo 4x", 4, 0.1, band=math.nan),
                         _row("bapo 4x", 3, 0.1, band=math.nan), _row("ppo 4x", 5, 0.1, band=math.nan)])
    line = config_error(capsys, lambda: check_whole_tokens(rows, "ramble"))
    assert line.startswith("bapo 4x seed(s) 3,4 have no whole token rows")
    assert "python -m src.run -m experiment=ramble_4x method=bapo seed=3,4 train.threads=1" in line
    # the pretrained testbed's refusal names its own experiment
    line = config_error(capsys, lambda: check_whole_tokens(rows, "smol"))
    assert "python -m src.run -m experiment=smol_4x method=bapo seed=3,4 train.threads=1" in line
    assert len(check_whole_tokens(rows.iloc[[0, 3]], "smol")) == 2  # ppo needs no token rows


def test_one_seed_under_two_override_levels_is_refused(capsys):
    rows = pd.DataFrame([{"cell": "ppo 4x", "pilot": "train.threads=1", "seed": 0},
                         {"cell": "ppo 4x", "pilot": "train.threads=2", "seed": 0}])
    line = config_error(capsys, lambda: check_one_level(rows, "testbed_grid_rows.csv"))
    assert line.startswith("testbed_grid_rows.csv holds one seed of a cell twice") and "train.threads=2" in line
    assert len(check_one_level(rows.iloc[:1], "testbed_grid_rows.csv")) == 1


def test_token_stats_are_not_taken_from_an_exports_sample(tmp_path):
    from experiments.calibration.testbed_targets import TOKEN_COLUMNS, token_stats

    # one group with a correct response of 2 tokens and a failing one of 4, every ratio 1;
    # 2 of the 6 sampled tokens had p < 0.5 (p = 0.3 and 0.45)
    rows = pd.DataFrame({"step": 0, "update": 0, "response_id": [0, 0, 1, 1, 1, 1], "group_id": 0,
                         "position": [0, 1, 0, 1, 2, 3], "ratio": 1.0,
                         "advantage": [1.0, 1.0, -1.0, -1.0, -1.0, -1.0],
                         "in_loss": True, "reward": [1.0, 1.0, 0.0, 0.0, 0.0, 0.0],
                         "response_length": [2, 2, 4, 4, 4, 4],
                         "logp_behavior": np.log([0.9, 0.3, 0.99, 0.45, 0.6, 0.8])})[TOKEN_COLUMNS]
    (tmp_path / "tokens").mkdir()
    rows.to_parquet(tmp_path / "tokens" / "step_000.parquet")
    whole = token_stats(tmp_path)
    assert whole == {"band_mass": 0.0, "length_ratio": 2.0, "tail": 2 / 6}  # r = 1 is in no band; 4 / 2
    (tmp_path / "tokens" / "step_000.parquet").rename(tmp_path / "tokens" / "sampled.parquet")
    assert all(math.isnan(v) for v in token_stats(tmp_path).values())


def test_token_stats_leave_out_a_delay_queues_warm_up(tmp_path):
    from experiments.calibration.testbed_targets import TOKEN_COLUMNS, token_stats

    # step 0 (warm-up of a 1-step delay): one negative token at r = 0.7, in the band; step 1:
    # the same token at r = 1.0, in no band. Whole run: mass 0.7 of 1.7 in the band; steady: 0.
    rows = pd.DataFrame({"step": [0, 1], "update": 0, "response_id": 0, "group_id": 0,
                         "position": 0, "ratio": [0.7, 1.0], "advantage": -1.0, "in_loss": True,
                         "reward": 0.0, "response_length": 1,
                         "logp_behavior": np.log([0.5, 0.5])})[TOKEN_COLUMNS]
    (tmp_path / "tokens").mkdir()
    rows.to_parquet(tmp_path / "tokens" / "step_000.parquet")
    assert token_stats(tmp_path)["band_mass"] == pytest.approx(0.7 / 1.7)
    (tmp_path / "config.yaml").write_text("offpolicy: {source: delay, delay: 1}\n")
    assert token_stats(tmp_path)["band_mass"] == 0.0


def test_each_testbed_judges_into_its_own_files():
    # the ramble testbed's judgement keeps its committed names; another never overwrites it
    md, csv = outputs("ramble")
    assert (md.name, csv.name) == ("testbed_judgement.md", "testbed_grid_rows.csv")
    md, csv = outputs("smol")
    assert (md.name, csv.name) == ("testbed_judgement_smol.md", "testbed_grid_rows_smol.csv")


def test_sampled_accuracy_is_shown_beside_the_greedy_verdicts():
    rows = _rows()
    assert sampled_beside(rows) is None  # rows measured before sampled accuracy was read
    one, four = rows["cell"] == "ppo 1x", rows["cell"] == "ppo 4x"
    rows["sampled_gain"], rows["sampled_final"] = math.nan, math.nan
    rows.loc[one, "sampled_gain"], rows.loc[one, "sampled_final"] = [0.3, 0.2, 0.1], [0.5, 0.4, 0.3]
    rows.loc[four, "sampled_gain"], rows.loc[four, "sampled_final"] = [0.2, 0.2, 0.2], [0.4, 0.2, 0.3]
    line = sampled_beside(rows)
    # 1x gains 0.3/0.2/0.1: mean 0.2, sd 0.1, half 4.303 * 0.1 / sqrt(3) = 0.248;
    # 4x - 1x per seed -0.1, -0.2, 0.0: mean -0.1, sd 0.1, the same half
    assert "1x ppo gain 0.200 ± 0.248 (n=3)" in line
    assert "4x ppo gain 0.200 (n=3; " in line  # three equal gains: no interval to draw
    assert "4x - 1x (paired) -0.100 ± 0.248 (n=3)" in line
    assert f"{_half([0.3, 0.2, 0.1]):.3f}" == "0.248"
    # the verdicts still read greedy accuracy
    assert judge(rows) == judge(_rows())
