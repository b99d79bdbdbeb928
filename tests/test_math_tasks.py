"""GSM8K / MATH dataset tasks on tiny local files that the tests write themselves."""

from __future__ import annotations

import builtins
import importlib.util

import pytest

from src.tasks import TASKS, Task, get_task
from src.tasks.math_dataset import (
    extract_final,
    last_boxed,
    simple_equal,
    split_hash_answer,
    write_jsonl,
)

HAS_MATH_VERIFY = importlib.util.find_spec("math_verify") is not None
needs_math_verify = pytest.mark.skipif(not HAS_MATH_VERIFY, reason="math-verify not installed")

GSM_TRAIN = [
    {"question": f"Tom has {i} apples and buys {i + 3} more. How many apples does he have?",
     "answer": f"He has {i}+{i + 3}=<<{i}+{i + 3}={2 * i + 3}>>{2 * i + 3} apples.\n#### {2 * i + 3}"}
    for i in range(1, 21)
]
GSM_TEST = [
    {"question": "A box holds 1,200 pens and 300 more arrive. How many pens are there?",
     "answer": "1200+300=<<1200+300=1500>>1500\n#### 1,500"},
    {"question": "Sara reads 4 pages a day for 5 days. How many pages?",
     "answer": "4*5=<<4*5=20>>20\n#### 20"},
    # also in the training file (with different spacing): must be dropped from training
    {"question": "Tom has 3 apples and   buys 6 more. How many apples does he have?",
     "answer": "3+6=9\n#### 9"},
]
MATH_ROWS = [
    {"problem": "What is $\\frac{1}{2}+\\frac{1}{4}$?", "level": "Level 2",
     "solution": "We add: $\\frac{2}{4}+\\frac{1}{4}=\\boxed{\\frac{3}{4}}$."},
    {"problem": "Solve $x^2=9$ for $x>0$.", "level": 1, "solution": "So $x=\\boxed{3}$.",
     "answer": "3"},
] + [{"problem": f"Compute ${k}\\cdot 7$.", "level": "Level 1",
      "solution": f"${k}\\cdot 7 = \\boxed{{{7 * k}}}$"} for k in range(2, 40)]


@pytest.fixture
def gsm_files(tmp_path):
    return write_jsonl(tmp_path / "train.jsonl", GSM_TRAIN), write_jsonl(tmp_path / "test.jsonl", GSM_TEST)


def gsm(gsm_files, **kw):
    train, test = gsm_files
    return get_task("gsm8k", train_source=str(train), eval_source=str(test), scorer="simple", **kw)


def test_registry_has_the_gpu_tasks():
    for name in ("gsm8k", "math500", "math_dataset"):
        assert name in TASKS


def test_gsm8k_from_local_jsonl(gsm_files):
    task = gsm(gsm_files)
    assert isinstance(task, Task)
    assert task.dropped_overlap == 1 and task.num_train == 19
    p = task.problem(0)
    assert p.prompt.endswith("put your final answer within \\boxed{}.")
    assert p.prompt.startswith("Tom has")
    assert "<<" not in p.solution and p.solution.endswith(f"\\boxed{{{p.answer}}}.")
    assert task.score(p, p.solution) == 1.0
    assert task.score(p, "I think it is \\boxed{0}") == 0.0
    evals = task.eval_problems(10)
    assert [e.answer for e in evals] == ["1500", "20", "9"]  # file order; commas removed


def test_problem_stream_is_deterministic_and_covers_each_epoch(gsm_files):
    a, b = gsm(gsm_files), gsm(gsm_files)
    n = a.num_train
    first = [a.problem(i).prompt for i in range(2 * n)]
    assert first == [b.problem(i).prompt for i in range(2 * n)]
    assert sorted(first[:n]) == sorted(first[n:])  # each epoch is a permutation of train
    assert len(set(first[:n])) == n
    assert first[:n] != first[n:]  # a fresh order per epoch
    assert a.problem(5).index == 5
    c = gsm(gsm_files, seed=1)
    assert [c.problem(i).prompt for i in range(n)] != first[:n]
    d = gsm(gsm_files, shuffle=False)
    assert d.problem(0).prompt.startswith("Tom has 1 apples")


def test_eval_is_disjoint_from_train(gsm_files):
    task = gsm(gsm_files)
    norm = lambda s: " ".join(s.split()).lower()  # noqa: E731
    train = {norm(task.problem(i).prompt) for i in range(task.num_train)}
    assert not train & {norm(p.prompt) for p in task.eval_problems(100)}


def test_single_source_is_split_by_hash(tmp_path):
    path = write_jsonl(tmp_path / "math.jsonl", MATH_ROWS)
    task = get_task("math_dataset", train_source=str(path), eval_fraction=0.3, scorer="simple")
    evals = task.eval_problems(1000)
    assert evals and task.num_train + len(evals) == len(MATH_ROWS)
    train = {task.problem(i).prompt for i in range(task.num_train)}
    assert not train & {p.prompt for p in evals}
    again = get_task("math_dataset", train_source=str(path), eval_fraction=0.3, scorer="simple", seed=5)
    assert [p.prompt for p in again.eval_problems(1000)] == [p.prompt for p in evals]  # seed-free split


def test_math_answers_from_field_or_boxed_solution_and_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{**r, "answer": r.get("answer", ""), "level": str(r["level"])} for r in MATH_ROWS]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "math.parquet")
    write_jsonl(tmp_path / "eval.jsonl", MATH_ROWS[:2])
    task = get_task("math500", train_source=str(tmp_path / "math.parquet"),
                    eval_source=str(tmp_path / "eval.jsonl"), scorer="simple", shuffle=False)
    assert task.dropped_overlap == 2
    e = task.eval_problems(2)
    assert [p.answer for p in e] == ["\\frac{3}{4}", "3"]
    assert [p.difficulty for p in e] == [2, 1]
    assert task.problem(0).answer == "14"


@pytest.mark.parametrize("scorer", ["simple", pytest.param("math_verify", marks=needs_math_verify)])
def test_scoring(tmp_path, scorer):
    write_jsonl(tmp_path / "train.jsonl", MATH_ROWS[2:])
    write_jsonl(tmp_path / "eval.jsonl", MATH_ROWS[:2])
    task = get_task("math500", train_source=str(tmp_path / "train.jsonl"),
                    eval_source=str(tmp_path / "eval.jsonl"), scorer=scorer)
    frac, three = task.eval_problems(2)
    assert task.score(frac, "so the sum is \\boxed{\\dfrac{3}{4}}.") == 1.0
    assert task.score(frac, "so the sum is \\boxed{0.75}") == 1.0
    assert task.score(frac, "so the sum is \\boxed{\\frac{1}{4}}") == 0.0
    assert task.score(three, "x = 3, so the answer is \\boxed{3}") == 1.0
    assert task.score(three, "The answer is 3.") == 1.0
    assert task.score(three, "") == 0.0
    assert task.score(three, "\\boxed{-3}") == 0.0


def test_simple_scorer_helpers():
    assert last_boxed("a \\boxed{\\frac{1}{2}} b \\boxed{x^{2}}") == "x^{2}"
    assert last_boxed("no box") is None
    assert split_hash_answer("a <<1+1=2>>2\n#### 1,234") == ("a 2", "1234")
    assert extract_final("so #### 42") == "42"
    assert extract_final("we get 3 then 17 apples") == "17"
    assert simple_equal("1500", "1,500") and simple_equal("\\frac{3}{4}", "0.75")
    assert simple_equal("90", "90^\\circ") and not simple_equal("2", "3")


def test_config_errors(tmp_path, gsm_files, monkeypatch):
    train, test = gsm_files
    with pytest.raises(TypeError, match="unknown key"):
        get_task("gsm8k", train_source=str(train), scorer="simple", bogus=1)
    with pytest.raises(FileNotFoundError, match="train_source"):
        get_task("gsm8k", train_source=str(tmp_path / "missing.jsonl"), scorer="simple")
    with pytest.raises(ValueError, match="prompt_template"):
        get_task("gsm8k", train_source=str(train), scorer="simple", prompt_template="no slot")
    real_import = builtins.__import__

    def no_optional(name, *args, **kwargs):
        if name in ("datasets", "math_verify"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_optional)
    with pytest.raises(ImportError, match="datasets"):
        get_task("gsm8k", train_source="openai/gsm8k", scorer="simple")
    with pytest.raises(ImportError, match="math-verify"):
        get_task("gsm8k", train_source=str(train), eval_source=str(test))


def test_task_configs_compose(gsm_files):
    from src.build import build_task
    from tests.conftest import compose

    train, test = gsm_files
    cfg = compose(["task=gsm8k", f"task.params.train_source={train}",
                   f"task.params.eval_source={test}", "task.params.scorer=simple"])
    task = build_task(cfg.task)
    assert task.name == "gsm8k" and task.num_train == 19
    assert task.problem(0).prompt.endswith("within \\boxed{}.")
    cfg = compose(["task=math500", f"task.params.train_source={train}",
                   "task.params.question_field=question", "task.params.scorer=simple",
                   "task.params.answer_format=hash", "task.params.eval_source=null"])
    assert build_task(cfg.task).name == "math500"
