"""The microscope's statistics and report: the two-stage cluster bootstrap against
distributions worked out by hand, the claims' paired differences, verdicts and Holm, and a
report written from study dirs made here with known effects."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml

from analysis.claims.microscope import Claim, differences, judge, verdict
from analysis.core.cluster_bootstrap import (
    Boot,
    cluster_bootstrap,
    states_needed,
    trunk_t,
    trunks_needed,
)
from analysis.figures.microscope_splits import class_effects_by
from analysis.microscope_report import main as report_main
from analysis.reports.microscope import search_outcomes, split_table, write_report
from analysis.reports.microscope_arms import arm_summary
from analysis.reports.microscope_trunk import trunk_entropies, with_trunk_entropies


def test_the_first_stage_resamples_trunks():
    # two trunks, one state each (1 and 3): the bootstrap means are 1, 2 and 3 with chances
    # 1/4, 1/2 and 1/4, so the 95% interval is [1, 3] and none is at or below 0
    rows = pd.DataFrame({"seed": [0, 1], "rollout": [0, 0], "value": [1.0, 3.0]})
    b = cluster_bootstrap(rows, "value", reps=20_000)
    assert b.mean == 2.0 and (b.low, b.high) == (1.0, 3.0) and b.p == 0.0
    assert b.se == pytest.approx(math.sqrt(0.5), rel=0.03)  # sd of {1, 2, 2, 3}/4: sqrt(1/2)
    assert b.cluster_means == (1.0, 3.0) and b.clusters == 2 and b.n == 2


def test_the_second_stage_resamples_rollouts_within_a_trunk_and_keeps_their_updates():
    # one trunk, rollout 0 with updates (0, 0) and rollout 1 with updates (2, 2): a drawn rollout
    # brings both its updates, so the means are 0, 1 and 2 with chances 1/4, 1/2, 1/4
    rows = pd.DataFrame({"seed": [0] * 4, "rollout": [0, 0, 1, 1], "value": [0.0, 0.0, 2.0, 2.0]})
    b = cluster_bootstrap(rows, "value", reps=20_000)
    assert (b.low, b.high) == (0.0, 2.0)
    assert b.se == pytest.approx(math.sqrt(0.5), rel=0.03)
    # p: twice the smaller share on one side of 0; P(mean <= 0) = 1/4
    assert b.p == pytest.approx(0.5, abs=0.02)


def test_a_constant_difference_has_no_spread_and_needs_no_more_states():
    rows = pd.DataFrame({"seed": [0, 1, 2], "rollout": [0, 0, 0], "value": [0.5] * 3})
    b = cluster_bootstrap(rows, "value")
    assert (b.mean, b.low, b.high, b.se) == (0.5, 0.5, 0.5, 0.0)
    assert math.isnan(states_needed(b, 0.05))


def test_states_needed_follows_the_normal_formula():
    b = Boot(mean=0.1, low=-0.1, high=0.3, p=0.3, se=0.1, n=100, clusters=3, cluster_means=())
    z = 1.959964 + 0.841621  # alpha 0.05 two-sided, power 0.8
    assert states_needed(b, 0.05) == pytest.approx(100 * z**2, rel=1e-5)


def _boot(mean: float, low: float, high: float, trunk_means: tuple[float, ...]) -> Boot:
    return Boot(mean=mean, low=low, high=high, p=0.01, se=0.5, n=60, clusters=len(trunk_means),
                cluster_means=trunk_means)


def test_the_t_interval_over_trunk_means_by_hand():
    t = trunk_t(_boot(2.0, 0.5, 3.5, (1.0, 2.0, 3.0)))
    half = 4.302653 / math.sqrt(3)  # t(0.975, 2) * sd 1 / sqrt(3 trunks)
    assert (t.low, t.high, t.sd) == pytest.approx((2 - half, 2 + half, 1.0), rel=1e-5)
    # df 2: P(T > x) = (1 - x / sqrt(x^2 + 2)) / 2, at x = 2 / (1 / sqrt 3)
    x = 2 * math.sqrt(3)
    assert t.p == pytest.approx(1 - x / math.sqrt(x * x + 2), rel=1e-6)
    assert math.isnan(trunk_t(_boot(1.0, 0.5, 1.5, (1.0,))).low)


def test_a_verdict_needs_the_bootstrap_and_the_trunk_means_to_agree():
    # the bootstrap excludes 0 but three trunks as spread as these do not: not settled
    assert verdict(_boot(2.0, 0.5, 3.5, (1.0, 2.0, 3.0)), 1) == "not settled"
    assert verdict(_boot(2.0, 0.5, 3.5, (1.9, 2.0, 2.1)), 1) == "held"
    assert verdict(_boot(2.0, 0.5, 3.5, (1.9, 2.0, 2.1)), -1) == "not held"
    assert verdict(_boot(2.0, -0.5, 3.5, (1.9, 2.0, 2.1)), 1) == "not settled"


def test_trunks_needed_reads_the_trunk_means_spread_not_the_bootstrap_se():
    # mean 2, trunk sd 1, alpha 0.05, power 0.8: at n = 4, t(.975, 3) + t(.8, 3) = 3.182 +
    # 0.978 > sqrt(4) * 2; at n = 5, 2.776 + 0.941 <= sqrt(5) * 2
    assert trunks_needed(_boot(2.0, 0.5, 3.5, (1.0, 2.0, 3.0)), 0.05) == 5
    assert math.isnan(trunks_needed(_boot(2.0, 0.5, 3.5, (2.0,)), 0.05))


def _branches(effects: dict[str, float], seeds=3, rollouts=4, noise=0.01) -> pd.DataFrame:
    """A branches table: per state a base d_entropy shared by every arm, plus the arm's effect
    and a small noise of its own."""
    rng = np.random.default_rng(0)
    rows = []
    for seed, rollout, update in itertools.product(range(seeds), range(rollouts), (1, 2, 3)):
        base = rng.normal(0, 1.0)  # the state's own level, common to every arm
        for arm, effect in effects.items():
            kind = "mask" if arm.startswith("mask:") else "zero" if arm == "zero" else "method"
            rows.append({"experiment": "e", "trunk": "ppo", "minibatch": 8, "seed": seed,
                         "rollout": rollout, "update": update, "arm": arm, "arm_kind": kind,
                         "d_entropy": base + effect + rng.normal(0, noise), "entropy_before": 2.0,
                         "positive_share": 0.4 + effect, "clip_frac_low_pos": 0.03,
                         "clip_frac_high_pos": 0.01, "bapo_reached": False,
                         "d_logp_correct": 0.0, "kl": 0.0, "clip_fraction": 0.01,
                         "grad_norm": 1.0, "grad_clipped": True, "c_low": 0.8, "c_high": 1.2})
    return pd.DataFrame(rows)


CLAIM = {"id": "X", "claim": "x", "table": "branches", "metric": "d_entropy", "paper": "p",
         "expect": "e"}


def test_differences_are_paired_by_state_and_the_common_level_cancels():
    table = _branches({"zero": 0.0, "mask:low_pos": 0.2})
    d = differences(Claim(**CLAIM, arm="mask:low_pos", ref="zero", direction="up"),
                    {"branches": table})
    assert len(d) == 36 and d["value"].mean() == pytest.approx(0.2, abs=0.01)
    # the same arm against another of its own metrics, and a level against a threshold
    d = differences(Claim(**{**CLAIM, "metric": "clip_frac_low_pos"}, arm="zero",
                          metric_ref="clip_frac_high_pos", direction="up"), {"branches": table})
    assert np.allclose(d["value"], 0.02)
    d = differences(Claim(**CLAIM, arm="zero", threshold=0.5, direction="none",
                          where="update == 1"), {"branches": table.assign(d_entropy=1.0)})
    assert len(d) == 12 and np.allclose(d["value"], 0.5)


def test_verdicts_pilots_and_holm():
    table = _branches({"zero": 0.0, "up": 0.2, "none": 0.0, "down": -0.2})
    claims = [Claim(**CLAIM, arm=a, ref="zero", direction="up") for a in ("up", "none", "down")]
    judged = judge(claims, {"branches": table}).set_index("compared")
    assert judged.loc["up - zero", "holm_verdict"] == "held"
    assert judged.loc["down - zero", "holm_verdict"] == "not held"
    assert judged.loc["none - zero", "holm_verdict"] == "not settled"
    assert judged.loc["none - zero", "states_needed"] > 0
    assert judged.loc["up - zero", "agree"] == "3 of 3"
    assert judged["tests"].iloc[0] == 3
    two = judge(claims, {"branches": table[table["seed"] < 2]})
    assert two["verdict"].iloc[0] == "pilot (2 trunks)" and math.isnan(two["p"].iloc[0])
    # a pilot is not tested, yet says how far it is from settled: the states it would need
    # at the level of a whole study's 3 directional rows, from its own spread
    boot = cluster_bootstrap(differences(claims[1], {"branches": table[table["seed"] < 2]}), "value")
    z = 2.3939 + 0.8416  # z of 1 - 0.05 / 3 / 2 and of 0.8
    assert two.set_index("compared").loc["none - zero", "states_needed"] == pytest.approx(
        boot.n * (z * boot.se / boot.mean) ** 2, rel=1e-3)
    assert verdict(Boot(math.nan, math.nan, math.nan, math.nan, math.nan, 0, 0, ()), 1) == "no data"


def test_search_outcomes_tell_a_reach_from_a_start_above_rho0():
    searched = pd.DataFrame({"arm": ["b"] * 5, "bapo_steps": [0, 3, 51, 51, 0],
                             "bapo_reached": [True, True, False, False, False],
                             "rho_before": [0.5, 0.2, 0.0, 0.1, math.nan]})
    fixed = pd.DataFrame({"arm": ["p"] * 2, "bapo_steps": [0, 0], "bapo_reached": [False, False],
                          "rho_before": [0.3, 0.4]})
    lines = search_outcomes(pd.concat([searched, fixed]))
    # one state in each: no gradient, above at the start, reached, not reached (twice, one of
    # them with rho 0); the rule that never searched gets no row
    assert lines[2:] == ["| b | 5 | 0.200 | 0.200 | 0.200 | 0.400 | 0.200 |"]
    assert search_outcomes(fixed) == ["No searching rule among the arms."]


def test_two_mini_batch_sizes_get_their_own_rows_and_states(tmp_path):
    # a study with a part at 32 responses on the same seeds, rollouts and updates as one at 8:
    # every per-arm section reads each size alone, and the header counts both sizes' states
    small, large = _branches({"zero": 0.0, "ppo": 0.0}), _branches({"ppo": 0.0}, seeds=2)
    large["minibatch"], large["d_entropy"], large["grad_clipped"] = 32, -0.5, False
    lines = arm_summary(pd.concat([small, large]))
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:] for line in lines[2:]}
    assert set(rows) == {"ppo, 8 a mini-batch", "ppo, 32 a mini-batch", "zero, 8 a mini-batch"}
    # 2 seeds x 4 rollouts x 3 updates at 32; d_entropy -0.5 and norm clip bound 0 by hand
    assert rows["ppo, 32 a mini-batch"][0] == "24"
    assert rows["ppo, 32 a mini-batch"][1] == "-0.5000"
    assert rows["ppo, 32 a mini-batch"][-1] == "+0.0000 |"
    assert arm_summary(small)[2].startswith("| ppo | 36 |")  # one size: the arm alone
    for seed, part in pd.concat([small, large]).groupby(["minibatch", "seed"]):
        _study(tmp_path / "studies" / f"b{seed[0]}", part, seed[1])
    claim = {**CLAIM, "arm": "ppo", "ref": "zero", "direction": "up"}
    text = write_report([tmp_path / "studies"], [claim], tmp_path / "out").read_text()
    assert "5 studies from commit(s) abc1234; 60 branched states" in text

def _study(root, seed_table: pd.DataFrame, seed: int):
    study = root / f"seed{seed}"
    study.mkdir(parents=True)
    (study / "microscope.yaml").write_text(yaml.safe_dump(
        {"settings": {}, "trunk_overrides": ["experiment=e", f"seed={seed}"], "commit": "abc1234"}))
    seed_table.to_parquet(study / "branches.parquet")


def test_the_report_from_study_dirs(tmp_path):
    table = _branches({"zero": 0.0, "mask:low_pos": 0.2, "mask:high_pos": -0.2, "ppo": 0.0,
                       "bapo": 0.05})
    # the norm clip bound on every low-p A>0 step, on a third of the high-p A>0 steps
    high_pos = table["arm"] == "mask:high_pos"
    table.loc[high_pos, "grad_clipped"] = table.loc[high_pos, "update"] == 1
    for seed, part in table.groupby("seed"):
        _study(tmp_path / "studies", part, seed)
    claims = [{**CLAIM, "id": "E1", "arm": "mask:low_pos", "ref": "zero", "direction": "up"},
              {**CLAIM, "id": "E3", "arm": "bapo", "ref": "ppo", "direction": "up",
               "metric": "positive_share"}]
    path = write_report([tmp_path / "studies"], claims, tmp_path / "out")
    text = path.read_text()
    assert "3 studies from commit(s) abc1234; 36 branched states" in text
    assert "| E1 |" in text and "| 3 of 3 | held |" in text
    assert "| p low, A > 0 | rises |" in text and "| p high, A > 0 | falls |" in text
    assert "| 36 | 1.00 |" in text.split("| p low, A > 0 |")[1].splitlines()[0]
    assert "| 36 | 0.33 |" in text.split("| p high, A > 0 |")[1].splitlines()[0]
    for name in ("entropy_by_arm", "insight2", "insight2_splits", "logp_vs_share"):
        assert (tmp_path / "out" / f"fig_microscope_{name}.png").stat().st_size > 0
    claims_csv = pd.read_csv(tmp_path / "out" / "claims.csv")
    assert list(claims_csv["id"]) == ["E1", "E3"]


def test_the_cli_refuses_a_missing_dir_and_a_sweep_without_claims(tmp_path, capsys):
    from tests.conftest import config_error

    message = config_error(capsys, lambda: report_main(["--studies", str(tmp_path / "none")]))
    assert message.startswith("--studies")
    _study(tmp_path / "s", _branches({"zero": 0.0}), 0)
    message = config_error(capsys, lambda: report_main(["--studies", str(tmp_path / "s"),
                                                        "--sweep", "main"]))
    assert message.startswith("--sweep: 'main'") and "claims" in message
    # a malformed expectation check or claim key is refused before any table is read
    sweeps = tmp_path / "sweeps.yaml"
    bad = {**CLAIM, "arm": "zero", "direction": "up"}
    for entry, names in (({**bad, "expect_check": {"range": [0.3, 0.1]}}, "low <= high"),
                         ({**bad, "expct": "typo"}, "unknown key")):
        sweeps.write_text(yaml.safe_dump({"study": {"claims": [entry]}}))
        message = config_error(capsys, lambda: report_main(  # noqa: B023 (called at once)
            ["--studies", str(tmp_path / "s"), "--sweep", "study", "--sweeps-file", str(sweeps),
             "--out", str(tmp_path / "out")]))
        assert message.startswith("--sweep study:") and names in message
        assert not (tmp_path / "out").exists()
    # a holdout check is a claim row too, refused the same way
    sweeps.write_text(yaml.safe_dump({"study": {"claims": [bad], "holdout": [{**bad, "wher": "x"}]}}))
    message = config_error(capsys, lambda: report_main(
        ["--studies", str(tmp_path / "s"), "--sweep", "study", "--sweeps-file", str(sweeps),
         "--out", str(tmp_path / "out")]))
    assert "unknown key" in message and not (tmp_path / "out").exists()


def test_the_committed_report_regenerates_from_the_committed_studies(tmp_path):
    from tests.conftest import REPO

    assert report_main(["--studies", str(REPO / "experiments/microscope/smol"),
                        "--out", str(tmp_path)]) == 0
    committed = (REPO / "figures" / "microscope" / "REPORT.md").read_text()
    assert (tmp_path / "REPORT.md").read_text() == committed


def _split(branches: pd.DataFrame, split: str) -> list[str]:
    return split_table(class_effects_by(branches, split), split)


def test_insight2_by_phase_splits_the_rollouts_in_thirds_and_reads_each_alone():
    # the low-p A>0 mask raises the entropy by 0.3 in the first two rollouts only: the pooled
    # mean is 0.1, each third's its own (rollouts 0-1: 0.3; 2-3 and 4-5: 0)
    table = _branches({"zero": 0.0, "mask:low_pos": 0.0}, rollouts=6, noise=0.0)
    early = (table["arm"] == "mask:low_pos") & (table["rollout"] < 2)
    table.loc[early, "d_entropy"] += 0.3
    table["entropy_before"] = 2.0 - 0.1 * table["rollout"]
    lines = _split(table, "phase")
    assert lines[0] == "| token class | paper (Insight 2) | rollouts 0-1 | rollouts 2-3 | rollouts 4-5 |"
    row = next(line for line in lines if line.startswith("| p low, A > 0 | rises |"))
    # 3 trunks x 2 rollouts x 3 updates a third; with no noise each interval is a point
    assert row.split(" | ")[2:5] == ["+0.3000 [+0.3000, +0.3000], 18 states",
                                     "+0.0000 [+0.0000, +0.0000], 18 states",
                                     "+0.0000 [+0.0000, +0.0000], 18 states |"]
    probe = next(line for line in lines if line.startswith("| probe entropy"))
    assert probe.endswith("| 1.950 | 1.750 | 1.550 |")
    # no trunk metrics read: the trunk's entropy rows say so rather than inventing one
    trunk = next(line for line in lines if line.startswith("| the trunk's rollout entropy"))
    assert trunk.endswith("| - | - | - |")
    table["trunk_entropy"] = 1.0 - 0.1 * table["rollout"]
    trunk = next(line for line in _split(table, "phase") if line.startswith("| the trunk's"))
    assert trunk.endswith("| 0.950 | 0.750 | 0.550 |")
    assert _split(table, "entropy") == [
        "No class-mask arm (with a zero arm and a `minibatch_entropy`) to split by."]


def test_insight2_by_minibatch_entropy_splits_the_states_in_thirds_by_their_entropy():
    # 36 states (3 trunks x 4 rollouts x 3 updates); state k's mini-batch entropy is a
    # permutation of 0..35 / 10, and the low-p A>0 mask's effect is 1 on the 12 states of
    # highest entropy only: the thirds read 0, 0 and 1, each on 12 states
    table = _branches({"zero": 0.0, "mask:low_pos": 0.0}, noise=0.0)
    states = table[["seed", "rollout", "update"]].drop_duplicates().reset_index(drop=True)
    states["minibatch_entropy"] = np.random.default_rng(1).permutation(36) / 10
    table = table.merge(states, on=["seed", "rollout", "update"])
    table.loc[(table["arm"] == "mask:low_pos") & (table["minibatch_entropy"] >= 2.4), "d_entropy"] += 1.0
    lines = _split(table, "entropy")
    assert lines[0] == ("| token class | paper (Insight 2) | mini-batch entropy 0.00-1.10 | "
                        "mini-batch entropy 1.20-2.30 | mini-batch entropy 2.40-3.50 |")
    row = next(line for line in lines if line.startswith("| p low, A > 0 | rises |"))
    assert row.split(" | ")[2:5] == ["+0.0000 [+0.0000, +0.0000], 12 states",
                                     "+0.0000 [+0.0000, +0.0000], 12 states",
                                     "+1.0000 [+1.0000, +1.0000], 12 states |"]
    level = next(line for line in lines if line.startswith("| the mini-batch's entropy"))
    assert level.endswith("| 0.550 | 1.750 | 2.950 |")  # each third's mean of its 12 values


def test_the_trunks_entropies_are_its_step_and_update_records(tmp_path):
    trunk = tmp_path / "trunk"
    trunk.mkdir()
    records = [{"kind": "step", "step": 0, "entropy_mean": 1.5},
               {"kind": "update", "step": 0, "update": 1, "entropy_mean": 9.0},
               {"kind": "step", "step": 1, "entropy_mean": 0.25},
               {"kind": "update", "step": 1, "update": 0, "entropy_mean": None},
               {"kind": "eval", "step": 1}]
    (trunk / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert trunk_entropies(trunk) == ({0: 1.5, 1: 0.25}, {(0, 1): 9.0})
    assert trunk_entropies(tmp_path / "none") == ({}, {})
    branches = pd.DataFrame({"rollout": [0, 0, 1], "update": [1, 2, 1]})
    got = with_trunk_entropies(branches, trunk)
    assert got["trunk_entropy"].tolist() == [1.5, 1.5, 0.25]
    assert got["minibatch_entropy"].tolist()[0] == 9.0 and got["minibatch_entropy"].isna().tolist() == [False, True, True]
