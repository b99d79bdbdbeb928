"""Tasks: the arithmetic generator, its verifier and its held-out split."""

from __future__ import annotations

import statistics

import pytest

from src.models.tokenizer import train_tokenizer
from src.tasks import Problem, Task, get_task
from src.tasks.arithmetic import ArithmeticTask, parse_answer


@pytest.fixture(scope="module")
def task() -> ArithmeticTask:
    return get_task("arithmetic", seed=0)


def _p(answer: str) -> Problem:
    return Problem(prompt="x", answer=answer, solution="", difficulty=1, index=0)


@pytest.mark.parametrize(
    ("answer", "response", "expected"),
    [
        # correct
        ("24", "12+7=19, 19+5=24. Answer: 24", 1.0),
        ("24", "Answer: 24", 1.0),
        ("24", "Answer:24", 1.0),
        ("24", "12+7=19. Answer: 24.", 1.0),
        ("24", "Answer: 24 \n", 1.0),
        ("24", "Answer: 7. Answer: 24", 1.0),  # the last "Answer:" counts
        ("24", "Answer: 024", 1.0),  # parses to the right integer
        ("-3", "Answer: -3", 1.0),
        # wrong answer, right form
        ("24", "12+7=19, 19+5=25. Answer: 25", 0.0),
        ("24", "Answer: 24. Answer: 25", 0.0),
        ("24", "12+7=19, 19+5=24. Answer: 2", 0.0),
        # malformed
        ("24", "12+7=19, 19+5=24.", 0.0),  # no "Answer:"
        ("24", "Answer:", 0.0),
        ("24", "Answer: twenty-four", 0.0),
        ("24", "Answer: 24.5", 0.0),
        ("24", "Answer: 24 12+7", 0.0),  # did not stop after the answer
        ("24", "answer: 24", 0.0),  # the tag is case-sensitive
        ("24", "", 0.0),
    ],
)
def test_score_hand_written(task, answer, response, expected):
    assert task.score(_p(answer), response) == expected


def test_parse_answer():
    assert parse_answer("a. Answer: 93") == 93
    assert parse_answer("Answer: x") is None
    assert parse_answer("no tag 93") is None


def test_solution_scores_one_and_matches_arithmetic(task):
    for i in range(200):
        p = task.problem(i)
        terms = [int(t) for t in p.prompt.removesuffix("=?\n").split("+")]
        assert int(p.answer) == sum(terms)
        assert p.difficulty == len(terms) - 1
        assert task.score(p, p.solution) == 1.0
        # every partial sum written in the solution is right
        for step in p.solution.split(". Answer:")[0].split(", "):
            lhs, rhs = step.split("=")
            a, b = lhs.split("+")
            assert int(a) + int(b) == int(rhs)
    assert isinstance(task, Task)


def test_problem_is_deterministic_in_seed_and_index(task):
    again = get_task("arithmetic", seed=0)
    assert [task.problem(i) for i in range(50)] == [again.problem(i) for i in range(50)]
    assert task.problem(17) == task.problem(17)
    assert task.problem(17).index == 17
    other = get_task("arithmetic", seed=1)
    assert [p.prompt for p in (task.problem(i) for i in range(50))] != [
        p.prompt for p in (other.problem(i) for i in range(50))
    ]
    assert task.eval_problems(20) == again.eval_problems(20)


def test_eval_set_is_disjoint_from_training(task):
    train = {task.problem(i).prompt for i in range(3000)}
    held_out = [p.prompt for p in task.eval_problems(300)]
    assert not train & set(held_out)
    assert len(set(held_out)) > 200  # and it is not degenerate (2-term sums repeat)
    two_digit = get_task("arithmetic", max_digits=2, max_terms=5)
    train = {two_digit.problem(i).prompt for i in range(3000)}
    held_out = [p.prompt for p in two_digit.eval_problems(300)]
    assert not train & set(held_out)
    assert len(set(held_out)) > 280


def test_difficulty_mix_and_config_checks():
    only_two = get_task("arithmetic", min_terms=2, max_terms=5, mix=[1, 0, 0, 0])
    assert {only_two.problem(i).difficulty for i in range(100)} == {1}
    uniform = get_task("arithmetic", min_terms=2, max_terms=5)
    assert {uniform.problem(i).difficulty for i in range(200)} == {1, 2, 3, 4}
    one_digit = get_task("arithmetic", max_digits=1, max_terms=3)
    assert all(len(t) == 1 for i in range(50) for t in one_digit.problem(i).prompt[:-3].split("+"))
    two_digit = get_task("arithmetic", max_digits=2)
    assert any(len(t) == 2 for i in range(50) for t in two_digit.problem(i).prompt[:-3].split("+"))
    with pytest.raises(ValueError, match="task.params.mix"):
        get_task("arithmetic", mix=[1, 2])
    with pytest.raises(ValueError, match="min_terms"):
        get_task("arithmetic", min_terms=1)
    with pytest.raises(ValueError, match="task.name"):
        get_task("no_such_task")
    with pytest.raises(TypeError):
        get_task("arithmetic", nonsense=1)


def test_solution_token_lengths_grow_with_difficulty(task):
    tok = train_tokenizer(task.corpus(2000), 320)
    by_diff: dict[int, list[int]] = {}
    for i in range(400):
        p = task.problem(i)
        n = len(tok(p.solution, add_special_tokens=False)["input_ids"]) + 1  # + EOS
        by_diff.setdefault(p.difficulty, []).append(n)
    assert sorted(by_diff) == [1, 2, 3, 4, 5, 6]
    medians = [statistics.median(by_diff[d]) for d in sorted(by_diff)]
    assert medians == sorted(medians) and medians[-1] >= medians[0] + 30
    all_lens = [n for v in by_diff.values() for n in v]
    assert 10 <= min(all_lens) <= 14 and 45 <= max(all_lens) <= 60


def test_corpus(task):
    texts = task.corpus(5)
    assert texts[0] == task.problem(0).prompt + task.problem(0).solution
    assert len(texts) == 5
