"""benchmarks/step_phases.py: each phase's share of the summed step time, per experiment."""

from __future__ import annotations

import pandas as pd
import pytest

from benchmarks.step_phases import phase_shares


def _steps(rows):
    cols = ["experiment", "time_step_s", "time_rollout_s", "time_behavior_s", "time_update_s",
            "time_telemetry_s"]
    return pd.DataFrame(rows, columns=cols)


def test_shares_are_of_the_summed_step_so_long_steps_weigh_what_they_cost():
    table = phase_shares(_steps([
        ("a", 10.0, 2.0, 2.0, 5.0, 1.0),
        ("a", 30.0, 3.0, 6.0, 21.0, 0.0),
        ("b", 4.0, 1.0, 1.0, 2.0, 0.0),
    ]))
    # a: summed step 40 s over 2 steps; rollout (2 + 3) / 40, behaviour 8 / 40, updates 26 / 40
    assert table.loc["a", "steps"] == 2 and table.loc["a", "mean step s"] == pytest.approx(20.0)
    assert table.loc["a", "rollout"] == pytest.approx(0.125)
    assert table.loc["a", "behaviour pass"] == pytest.approx(0.2)
    assert table.loc["a", "updates"] == pytest.approx(0.65)
    assert table.loc["a", "token rows"] == pytest.approx(0.025)
    assert table.loc["b", "updates"] == pytest.approx(0.5)


def test_steps_without_their_clock_are_left_out():
    table = phase_shares(_steps([("a", 10.0, 5.0, 0.0, 5.0, 0.0),
                                 ("a", None, None, None, None, None)]))
    assert table.loc["a", "steps"] == 1 and table.loc["a", "rollout"] == pytest.approx(0.5)


def test_records_without_phase_clocks_are_refused_by_name():
    with pytest.raises(ValueError, match=r"lack \['time_telemetry_s'\]"):
        phase_shares(pd.DataFrame({"experiment": ["a"], "time_step_s": [1.0],
                                   "time_rollout_s": [1.0], "time_behavior_s": [0.0],
                                   "time_update_s": [0.0]}))
    with pytest.raises(ValueError, match="no step record has time_step_s"):
        phase_shares(_steps([("a", None, None, None, None, None)]))
