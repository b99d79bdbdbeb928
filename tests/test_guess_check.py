"""The guess-and-check task: worked searches that are valid by construction, a strict
verifier, disjoint streams and clear errors for bad parameters."""

from __future__ import annotations

import re

import pytest

from src.tasks import get_task
from src.tasks.guess_check import GuessCheckTask

STEP = re.compile(r"(\d+)\+(\d+)=(\d+)( low| high)?")


@pytest.fixture(scope="module")
def task() -> GuessCheckTask:
    return get_task("guess_check", seed=0)


def test_solution_written_by_hand():
    assert GuessCheckTask.solution([5, 14, 12], 7, 19) == "5+7=12 low, 14+7=21 high, 12+7=19. Answer: 12"
    assert GuessCheckTask.solution([3], 1, 4) == "3+1=4. Answer: 3"


@pytest.mark.parametrize("response,expected", [
    ("5+7=12 low, 12+7=19. Answer: 12", 1.0),
    ("5+7=12 low, 13+7=20 high, 11+7=18 low", 0.0),  # cut off before answering
    ("12+7=19. Answer: 13", 0.0),
    ("12+7=19. Answer: 12 and more", 0.0),  # text after the number is malformed
])
def test_score_hand_written(task, response, expected):
    problem = next(p for p in (task.problem(i) for i in range(500)) if p.prompt == "?+7=19\n")
    assert task.score(problem, response) == expected


def test_reference_searches_are_valid_and_fit_the_budget(task):
    for i in range(400):
        p = task.problem(i)
        b, c = map(int, re.fullmatch(r"\?\+(\d+)=(\d+)\n", p.prompt).groups())
        steps = STEP.findall(p.solution)
        assert 1 <= len(steps) == p.difficulty <= task.max_guesses
        lo, hi = 1, task.max_value
        for g, addend, s, verdict in steps:
            g, s = int(g), int(s)
            assert int(addend) == b and s == g + b  # each check adds right
            assert lo <= g <= hi  # each guess is inside what the earlier answers leave open
            want = " low" if s < c else " high" if s > c else ""
            assert verdict == want
            lo, hi = (g + 1, hi) if s < c else (lo, g - 1) if s > c else (lo, hi)
        assert int(steps[-1][0]) + b == c and int(p.answer) == c - b
        assert task.score(p, p.solution) == 1.0


def test_streams_are_deterministic_and_disjoint(task):
    again = GuessCheckTask(seed=0)
    assert [task.problem(i) for i in range(50)] == [again.problem(i) for i in range(50)]
    assert [p.prompt for p in GuessCheckTask(seed=1).eval_problems(30)] != \
        [p.prompt for p in task.eval_problems(30)]
    train = {task.problem(i).prompt for i in range(2000)}
    held_out = {p.prompt for p in task.eval_problems(256)}
    assert held_out and not train & held_out


@pytest.mark.parametrize("params,match", [
    ({"max_value": 1}, "max_value must be >= 2"),
    ({"max_addend": 0}, "max_addend must be >= 1"),
    ({"max_guesses": 0}, "max_guesses must be >= 1"),
    ({"eval_fraction": 0.5}, "eval_fraction must be in"),
])
def test_bad_params_name_the_key(params, match):
    with pytest.raises(ValueError, match=match):
        GuessCheckTask.check_params(**params)


def test_unknown_param_lists_the_valid_ones():
    with pytest.raises(TypeError, match=r"unknown key\(s\) \['max_terms'\].*max_value"):
        GuessCheckTask.check_params(max_terms=3)


def test_rambling_searches_ignore_the_answers_never_answer_and_outrun_the_budget():
    from src.tasks.procedural import parse_answer

    task = get_task("guess_check", seed=0, ramble_fraction=0.3, ramble_guesses=12)
    problems = [task.problem(i) for i in range(400)]
    rambles = [p for p in problems if "Answer:" not in p.solution]
    assert 0.22 < len(rambles) / len(problems) < 0.38  # about the share asked for
    for p in rambles:
        steps = p.solution.rstrip(",").split(", ")
        assert len(steps) == p.difficulty == 12
        b, total = int(p.prompt.split("+")[1].split("=")[0]), int(p.prompt.split("=")[1])
        assert all(int(s.split("+")[0]) != int(p.answer) for s in steps)  # never hits x
        for s in steps:  # every line is still true arithmetic with a true low/high
            g = int(s.split("+")[0])
            assert s == f"{g}+{b}={g + b} " + ("low" if g + b < total else "high")
        assert parse_answer(p.solution) is None and task.score(p, p.solution) == 0.0
    searches = [p for p in problems if "Answer:" in p.solution]
    assert all(task.score(p, p.solution) == 1.0 for p in searches)
    # the option is named in the config (and the warm start's key) only when it is used
    assert "ramble_fraction" not in get_task("guess_check", seed=0).config
    assert task.config["ramble_fraction"] == 0.3
    with pytest.raises(ValueError, match="ramble_fraction must be in"):
        get_task("guess_check", ramble_fraction=1.0)
