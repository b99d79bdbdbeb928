"""The trunks a microscope study plans, and which are in: analysis/claims/microscope_plan.py."""

from __future__ import annotations

from analysis.claims.microscope_plan import completeness_line, missing_trunks, planned_trunks

# the shape of microscope_smol: four one-trunk parts, then a part of two trunks with more keys
PARTS = [{"seed": [s], "method": ["ppo"], "experiment": ["smol_4x"]} for s in range(2)] + [
    {"seed": [0, 1], "method": ["ppo"], "experiment": ["smol_4x"],
     "train.staleness_mode": ["fixed_update"], "train.steps": [18], "flag": [True]}]
RUN = ["train.threads=1", "checkpoint.every=2"]  # what the runner adds, on no planned key


def _study(*overrides: str) -> dict:
    return {"trunk_overrides": [*overrides, *RUN]}


def test_each_combination_of_a_part_is_one_trunk_with_hydra_spelled_values():
    trunks = planned_trunks(PARTS)
    assert len(trunks) == 4
    assert trunks[3] == {"seed=1", "method=ppo", "experiment=smol_4x", "flag=true",
                         "train.staleness_mode=fixed_update", "train.steps=18"}


def test_a_trunk_with_more_planned_keys_does_not_stand_for_a_plainer_one():
    fifth = ["method=ppo", "experiment=smol_4x", "train.staleness_mode=fixed_update",
             "train.steps=18", "flag=true"]
    meta = [_study("seed=0", *fifth), _study("seed=1", *fifth), _study("seed=1", "method=ppo",
                                                                       "experiment=smol_4x")]
    # part 5's seed 0 is not part 1's seed 0, though it holds all of part 1's overrides
    assert missing_trunks(PARTS, meta) == ["experiment=smol_4x method=ppo seed=0"]
    assert completeness_line(PARTS, missing_trunks(PARTS, meta)).startswith(
        "3 of the 4 trunks the design plans are in")
    meta.append(_study("seed=0", "method=ppo", "experiment=smol_4x"))
    assert missing_trunks(PARTS, meta) == []
    assert completeness_line(PARTS, []).startswith("All 4 trunks the design plans are in")


def test_without_a_design_nothing_is_final():
    assert "not given" in completeness_line(None, [])
