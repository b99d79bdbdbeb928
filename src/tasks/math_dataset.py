"""Math word problems from a dataset (GSM8K, MATH / MATH-500), scored with math-verify.

The GPU tasks. Problems come from local JSONL / JSON / Parquet files, or from the HF hub
through the optional `datasets` library (`pip install -e '.[gpu-tasks]'`). Every knob is a
constructor argument, so `conf/task/*.yaml` sets them under `params:`.

Determinism: the task reads its rows once; `problem(i)` is row `perm_e[i mod N]` of the
training rows, with `perm_e` a permutation seeded by (seed, epoch e = i // N), so the
trainer's position in the stream is a single int and resume needs nothing else.

Disjointness: with a separate eval source (GSM8K test, MATH-500), every training row whose
normalised question also occurs in the eval rows is dropped. Without one, the single source
is split by a seed-independent hash of the normalised question (`eval_fraction`), the same
rule as the arithmetic task. Either way no held-out question is ever trained on.

Reward: binary. `scorer: math_verify` (default) parses the reference answer as
`\\boxed{answer}` and the response with math-verify's LaTeX and expression extractors, as
verl's math-verify reward does. `scorer: simple` is a dependency-free fallback (last
`\\boxed{}`, else the text after `####`, else "answer is X", else the last number; compared
as normalised strings or numbers); it is weaker, so choose it on purpose.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from src.tasks.base import Problem
from src.tasks.procedural import in_eval_partition

DEFAULT_TEMPLATE = "{question}\nPlease reason step by step, and put your final answer within \\boxed{}."
LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet")
SCORERS = ("math_verify", "simple")
ANSWER_FORMATS = ("auto", "hash")


# --- reading rows ---------------------------------------------------------------------------

def _looks_local(source: str) -> bool:
    return source.startswith((".", "/", "~")) or source.endswith(LOCAL_SUFFIXES) or \
        Path(source).expanduser().exists()


def read_rows(source: str, *, config: str | None = None, split: str = "train",
              key: str = "task.params.train_source", hint: str = "") -> list[dict[str, Any]]:
    """Rows of a local .jsonl/.json/.parquet file, or of an HF hub dataset split.

    `hint` (where a local file would go) ends the message when the source cannot be read.
    """
    hint = f"; {hint}" if hint else ""
    if _looks_local(source):
        path = Path(source).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"{key}={source!r}: no such file{hint}")
        if path.suffix == ".jsonl":
            with path.open(encoding="utf-8") as f:
                return [json.loads(line) for line in f if line.strip()]
        if path.suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict):  # {"data": [...]} or {"train": [...], "test": [...]}
                data = data.get(split, data.get("data"))
            if not isinstance(data, list):
                raise ValueError(f"{key}={source!r}: expected a JSON list of objects "
                                 f"(or a dict with a {split!r} or 'data' list)")
            return data
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        raise ValueError(f"{key}={source!r}: unsupported file type; use one of {LOCAL_SUFFIXES}")
    try:
        import datasets
    except ImportError:
        raise ImportError(
            f"{key}={source!r} is not a local file, and loading it from the HF hub needs the "
            f"`datasets` package: pip install -e '.[gpu-tasks]'{hint}") from None
    try:
        ds = datasets.load_dataset(source, config, split=split)
    except Exception as e:  # offline, unknown name, no access: the hub's many error types
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        raise FileNotFoundError(f"{key}={source!r} could not be loaded from the HF hub "
                                f"({type(e).__name__}: {first}){hint}") from None
    return [dict(row) for row in ds]


# --- answers --------------------------------------------------------------------------------

def last_boxed(text: str) -> str | None:
    r"""Content of the last `\boxed{...}` (or `\fbox{...}`), braces balanced; None if absent."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0:
        # `\boxed 5` (no braces)
        m = re.match(r"\\boxed\s+([^\s$]+)", text[start:])
        return m.group(1) if m else None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1:j]
    return None


_CALC = re.compile(r"<<[^>]*>>")


def split_hash_answer(text: str) -> tuple[str, str]:
    """GSM8K's `rationale\\n#### 72` -> (rationale without <<calc>> notes, '72')."""
    if "####" not in text:
        raise ValueError("GSM8K-style answer without a '#### <answer>' line")
    rationale, _, final = text.rpartition("####")
    return _CALC.sub("", rationale).strip(), final.strip().replace(",", "")


_NUM = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def _normalise(ans: str) -> str:
    s = ans.strip().strip("$").strip()
    s = re.sub(r"\\text\{\s*([^{}]*)\}", r"\1", s)
    for old, new in (("\\!", ""), ("\\,", ""), ("\\;", ""), ("\\left", ""), ("\\right", ""),
                     ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("^\\circ", ""),
                     ("^{\\circ}", ""), ("\\%", ""), ("%", ""), ("\\$", "")):
        s = s.replace(old, new)
    s = s.replace(" ", "").rstrip(".")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    return s


def _as_number(s: str) -> float | None:
    m = re.fullmatch(r"(-?\d+(?:\.\d+)?)|\\frac\{(-?\d+)\}\{(-?\d+)\}|(-?\d+)/(\d+)", s)
    if not m:
        return None
    if m.group(1) is not None:
        return float(m.group(1))
    num, den = (m.group(2), m.group(3)) if m.group(2) is not None else (m.group(4), m.group(5))
    return float(num) / float(den) if float(den) != 0 else None


def extract_final(response: str) -> str | None:
    """The simple scorer's reading of a response's final answer."""
    boxed = last_boxed(response)
    if boxed is not None:
        return boxed
    if "####" in response:
        return response.rpartition("####")[2].strip().split("\n")[0]
    m = list(re.finditer(r"answer is[:\s]*\$?([^\n$]+?)\$?\s*(?:\.|\n|$)", response))
    if m:
        return m[-1].group(1)
    nums = _NUM.findall(response)
    return nums[-1] if nums else None


def simple_equal(gold: str, pred: str | None) -> bool:
    if pred is None:
        return False
    g, p = _normalise(gold), _normalise(pred)
    if g == p:
        return True
    gn, pn = _as_number(g), _as_number(p)
    return gn is not None and pn is not None and abs(gn - pn) <= 1e-6 * max(1.0, abs(gn))


def _normalise_question(q: str) -> str:
    return " ".join(q.split()).lower()


# --- the task -------------------------------------------------------------------------------

class MathDatasetTask:
    """A dataset of math problems with reference answers; see the module docstring.

    Subclasses only change `DEFAULTS` (GSM8K and MATH-500 presets); every key can be
    overridden from `task.params`.
    """

    name = "math_dataset"
    DEFAULTS: dict[str, Any] = {
        "train_source": None,  # local .jsonl/.json/.parquet path or HF hub dataset name
        "train_config": None,  # hub dataset config (e.g. "main" for openai/gsm8k)
        "train_split": "train",
        "eval_source": None,  # None: carve the held-out set out of train_source
        "eval_config": None,
        "eval_split": "test",
        "eval_fraction": 0.1,  # only when eval_source is None
        "question_field": "problem",
        "answer_field": "answer",  # missing/empty in a row -> last \boxed{} of the solution
        "solution_field": "solution",
        "answer_format": "auto",  # auto | hash (GSM8K: "rationale #### 72" in answer_field)
        "difficulty_field": "level",  # MATH "Level 3" or 3; None/missing -> number of lines
        "prompt_template": DEFAULT_TEMPLATE,  # "{question}" is replaced (no str.format)
        "scorer": "math_verify",  # math_verify | simple
        "seed": 0,
        "shuffle": True,
        "max_train": None,  # keep only the first N training rows (after the overlap filter)
    }

    @classmethod
    def check_params(cls, **params: Any) -> dict[str, Any]:
        """The merged parameters, or the error naming the bad key; reads no data."""
        unknown = sorted(set(params) - set(cls.DEFAULTS))
        if unknown:
            raise TypeError(f"task.params: unknown key(s) {unknown} for task {cls.name!r}; "
                            f"valid keys: {sorted(cls.DEFAULTS)}")
        p = {**cls.DEFAULTS, **params}
        if not p["train_source"]:
            raise ValueError(f"task.params.train_source must name a file or HF dataset for "
                             f"task {cls.name!r}")
        if p["scorer"] not in SCORERS:
            raise ValueError(f"task.params.scorer must be one of {list(SCORERS)}, got {p['scorer']!r}")
        if p["answer_format"] not in ANSWER_FORMATS:
            raise ValueError(f"task.params.answer_format must be one of {list(ANSWER_FORMATS)}, "
                             f"got {p['answer_format']!r}")
        if "{question}" not in p["prompt_template"]:
            raise ValueError("task.params.prompt_template must contain '{question}'")
        if p["eval_source"] is None and not 0.0 < float(p["eval_fraction"]) < 0.5:
            raise ValueError(f"task.params.eval_fraction must be in (0, 0.5), got {p['eval_fraction']}")
        return p

    def local_file_hint(self, key: str) -> str:
        """Where to put a split on an offline machine, and what its rows hold."""
        split = "test" if key.endswith("eval_source") else "train"
        fields = [self.p[f] for f in ("question_field", "answer_field", "solution_field")]
        example = f"data/{self.name}/{split}.jsonl"
        return (f"without a network, put the {split} split in a local .jsonl/.json/.parquet "
                f"file (rows with fields {', '.join(dict.fromkeys(f for f in fields if f))}), "
                f"e.g. {example}, and set {key}={example}")

    def __init__(self, **params: Any) -> None:
        p = self.check_params(**params)
        self.p = p
        if p["scorer"] == "math_verify":
            try:
                import math_verify  # noqa: F401
            except ImportError:
                raise ImportError(
                    "task.params.scorer=math_verify needs the math-verify package: "
                    "pip install 'math-verify[antlr4_9_3]' (the antlr pin keeps Hydra working), "
                    "or set task.params.scorer=simple") from None

        train_rows = read_rows(p["train_source"], config=p["train_config"],
                               split=p["train_split"], key="task.params.train_source",
                               hint=self.local_file_hint("task.params.train_source"))
        train = [self._row_to_problem(r, i, "train_source") for i, r in enumerate(train_rows)]
        if p["eval_source"] is not None:
            eval_rows = read_rows(p["eval_source"], config=p["eval_config"],
                                  split=p["eval_split"], key="task.params.eval_source",
                                  hint=self.local_file_hint("task.params.eval_source"))
            evals = [self._row_to_problem(r, i, "eval_source") for i, r in enumerate(eval_rows)]
            held = {_normalise_question(e.prompt) for e in evals}
            kept = [t for t in train if _normalise_question(t.prompt) not in held]
            self.dropped_overlap = len(train) - len(kept)
            train = kept
        else:
            frac = float(p["eval_fraction"])
            evals = [t for t in train if in_eval_partition(_normalise_question(t.prompt), frac)]
            train = [t for t in train if not in_eval_partition(_normalise_question(t.prompt), frac)]
            self.dropped_overlap = 0
        if p["max_train"] is not None:
            train = train[:int(p["max_train"])]
        if not train:
            raise ValueError(f"task.params.train_source={p['train_source']!r} gave no training problems")
        if not evals:
            raise ValueError(f"task {self.name!r} has no held-out problems; set task.params.eval_source "
                             "or raise task.params.eval_fraction")
        # Stored as raw (question, answer, solution, difficulty); prompts are built on demand.
        self._train = train
        self._eval = evals
        self.score_errors = 0
        self._perms: dict[int, list[int]] = {}

    # -- rows -------------------------------------------------------------------------------
    def _row_to_problem(self, row: dict[str, Any], i: int, key: str) -> Problem:
        p = self.p
        if p["question_field"] not in row:
            raise KeyError(f"task.params.{key}: row {i} has no field {p['question_field']!r} "
                           f"(task.params.question_field); its fields are {sorted(row)}")
        question = str(row[p["question_field"]]).strip()
        raw_answer = row.get(p["answer_field"]) if p["answer_field"] else None
        solution = row.get(p["solution_field"]) if p["solution_field"] else None
        if p["answer_format"] == "hash":
            rationale, answer = split_hash_answer(str(raw_answer if raw_answer is not None else solution))
            solution = f"{rationale}\nThe final answer is \\boxed{{{answer}}}."
        elif raw_answer not in (None, ""):
            answer = str(raw_answer).strip()
            solution = str(solution) if solution else f"The final answer is \\boxed{{{answer}}}."
        else:
            answer = last_boxed(str(solution or ""))
            if answer is None:
                raise ValueError(f"task.params.{key}: row {i} has no {p['answer_field']!r} field and "
                                 f"no \\boxed{{}} answer in {p['solution_field']!r}")
            solution = str(solution)
        level = row.get(p["difficulty_field"]) if p["difficulty_field"] else None
        m = re.search(r"\d+", str(level)) if level is not None else None
        difficulty = int(m.group()) if m else len([ln for ln in str(solution).splitlines() if ln.strip()])
        # `prompt` holds the bare question here; `_with_template` makes the policy's prompt.
        return Problem(prompt=question, answer=answer, solution=solution, difficulty=difficulty, index=i)

    def _with_template(self, problem: Problem, index: int) -> Problem:
        prompt = self.p["prompt_template"].replace("{question}", problem.prompt)
        return Problem(prompt=prompt, answer=problem.answer, solution=problem.solution,
                       difficulty=problem.difficulty, index=index)

    def _perm(self, epoch: int) -> list[int]:
        """Training order of epoch `epoch`; str seeds are stable across processes."""
        if epoch not in self._perms:
            n = len(self._train)
            order = list(range(n))
            if self.p["shuffle"]:
                random.Random(f"{self.name}:{self.p['seed']}:{epoch}").shuffle(order)
            if len(self._perms) >= 4:
                self._perms.pop(next(iter(self._perms)))
            self._perms[epoch] = order
        return self._perms[epoch]

    # -- Task protocol --------------------------------------------------------------------------
    @property
    def config(self) -> dict[str, Any]:
        return {"name": self.name, **{k: self.p[k] for k in sorted(self.DEFAULTS)},
                "num_train": len(self._train), "num_eval": len(self._eval)}

    @property
    def num_train(self) -> int:
        return len(self._train)

    def problem(self, index: int) -> Problem:
        if index < 0:
            raise ValueError(f"problem index must be >= 0, got {index}")
        epoch, pos = divmod(index, len(self._train))
        return self._with_template(self._train[self._perm(epoch)[pos]], index)

    def eval_problems(self, n: int) -> list[Problem]:
        """The first `n` held-out problems in file order (all of them if there are fewer)."""
        return [self._with_template(p, i) for i, p in enumerate(self._eval[:n])]

    def score(self, problem: Problem, response: str) -> float:
        if self.p["scorer"] == "simple":
            return 1.0 if simple_equal(problem.answer, extract_final(response)) else 0.0
        return 1.0 if self._math_verify(problem.answer, response) else 0.0

    def _math_verify(self, answer: str, response: str) -> bool:
        from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

        try:
            gold = parse("\\boxed{" + answer + "}", extraction_config=[LatexExtractionConfig()])
            if not gold:  # an answer math-verify cannot read: fall back to string equality
                return simple_equal(answer, extract_final(response))
            pred = parse(response, extraction_config=[LatexExtractionConfig(), ExprExtractionConfig()])
            return bool(pred) and bool(verify(gold, pred))
        except Exception:  # timeouts and parser errors count as wrong, and are counted
            self.score_errors += 1
            return False

    def corpus(self, n: int) -> list[str]:
        return [p.prompt + "\n" + p.solution for p in (self.problem(i) for i in range(n))]


class GSM8KTask(MathDatasetTask):
    """Grade-school word problems; integer answers after `####`."""

    name = "gsm8k"
    DEFAULTS = {**MathDatasetTask.DEFAULTS,
                "train_source": "openai/gsm8k", "train_config": "main", "train_split": "train",
                "eval_source": "openai/gsm8k", "eval_config": "main", "eval_split": "test",
                "question_field": "question", "answer_field": "answer",
                "solution_field": "answer", "answer_format": "hash", "difficulty_field": None}


class Math500Task(MathDatasetTask):
    """Train on MATH (7.5k competition problems), evaluate on MATH-500."""

    name = "math500"
    DEFAULTS = {**MathDatasetTask.DEFAULTS,
                "train_source": "DigitalLearningGmbH/MATH-lighteval", "train_split": "train",
                "eval_source": "HuggingFaceH4/MATH-500", "eval_split": "test"}


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> Path:
    """Helper for tests and data prep: one JSON object per line."""
    path = Path(path)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path
