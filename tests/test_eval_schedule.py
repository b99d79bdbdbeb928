"""Evals where they count (src/eval_schedule.py): the default schedule is the old one, step by
step; `eval.at` picks the steps; `eval.final_problems` sizes step 0 and the final window; a
bad schedule is refused before any work."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from src.eval_schedule import at_problem, eval_steps, final_window
from src.run import execute
from tests.conftest import compose, config_error
from tests.test_e2e import read_metrics


def _eval(every=10, at=None, final_problems=None):
    return SimpleNamespace(every=every, at=at, final_problems=final_problems)


@pytest.mark.parametrize("every,steps", [(1, 3), (2, 3), (4, 10), (5, 30), (10, 10), (7, 5)])
def test_the_default_schedule_is_every_k_steps_and_the_end(every, steps):
    # what the trainer did before: evaluate after step `done` when done % every == 0 or at the end
    old = [0] + [done for done in range(1, steps + 1) if done % every == 0 or done == steps]
    assert eval_steps(_eval(every), steps) == old


def test_eval_at_and_the_final_window():
    cfg = _eval(at=[2, 5, 20, 25, 30], final_problems=180)
    assert eval_steps(cfg, 30) == [0, 2, 5, 20, 25, 30]
    assert final_window(cfg, 30) == {0, 20, 25, 30}
    assert [at_problem(cfg, 64, 30, s) for s in (0, 2, 5, 20, 25, 30)] == [180, 64, 64, 180, 180, 180]
    # without final_problems every eval runs on task.eval_problems
    assert {at_problem(_eval(at=[5, 30]), 64, 30, s) for s in (0, 5, 30)} == {64}


def test_a_run_evaluates_where_its_schedule_says_on_the_sizes_it_says(tmp_path, smoke_overrides):
    overrides = [*smoke_overrides, "train.steps=5", "eval.at=[1,2,3,4,5]", "task.eval_problems=4",
                 "eval.final_problems=6", "eval.samples=1"]
    assert execute(compose(overrides), tmp_path / "run") == "finished"
    evals = read_metrics(tmp_path / "run")["eval"]
    assert [(e["step"], e["n_problems"]) for e in evals] == [(0, 6), (1, 4), (2, 4), (3, 6), (4, 6),
                                                             (5, 6)]


@pytest.mark.parametrize("at", ["[]", "[0,3]", "[3,2]", "[1,2]", "[2,2,3]"])
def test_a_bad_schedule_exits_2_naming_eval_at(capsys, smoke_overrides, at):
    from src.run import preflight

    message = config_error(capsys, lambda: preflight([*smoke_overrides, f"eval.at={at}"]))
    assert message.startswith("eval.at ")
