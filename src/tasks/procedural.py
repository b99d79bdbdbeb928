"""What the procedural tasks (chain sums, guess and check) share.

A problem is a pure function of (task config, stream, index): its generator is seeded with
`<name>:<seed>:<stream>:<index>` (str seeds go through sha512, so they are stable across
processes and PYTHONHASHSEED). The held-out stream is disjoint from the training stream by
*content*: a problem belongs to the eval partition iff a hash of its prompt (independent of
the seed) falls below `eval_fraction`; training draws reject eval-partition prompts and eval
draws reject the rest, so no held-out question is ever trained on. The verifier reads the
integer after the last "Answer:".
"""

from __future__ import annotations

import hashlib
import inspect
import random
import re
from typing import Any

from src.tasks.base import Problem

ANSWER_TAG = "Answer:"
# After the last "Answer:": optional spaces, an integer, an optional full stop, nothing else.
_ANSWER_RE = re.compile(r"\s*([+-]?\d+)\s*\.?\s*")


def parse_answer(response: str) -> int | None:
    """The integer after the last "Answer:", or None when it is missing or malformed.

    Strict on purpose: text after the number (other than a full stop and whitespace) makes
    the answer malformed, so a policy that does not stop after answering earns no reward.
    Decode responses with `skip_special_tokens=True` before scoring.
    """
    pos = response.rfind(ANSWER_TAG)
    if pos < 0:
        return None
    m = _ANSWER_RE.fullmatch(response[pos + len(ANSWER_TAG) :])
    return int(m.group(1)) if m else None


def in_eval_partition(prompt: str, eval_fraction: float) -> bool:
    h = int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:8], "big")
    return h / 2.0**64 < eval_fraction


class ProceduralTask:
    """The Task protocol for generated problems. A subclass sets `name`, `seed`,
    `eval_fraction` and `space_hint` (which params enlarge its problem space) and draws a
    problem in three parts: `_draw(rng)` the problem's values, `_prompt(values)` its prompt
    (checked against the partition before anything else is drawn) and
    `_problem(values, rng, index)` the rest (the worked solution)."""

    name: str
    seed: int
    eval_fraction: float
    space_hint: str

    @classmethod
    def check_params(cls, **params: Any) -> None:
        """Raise the error the constructor would, naming unknown keys (it reads nothing)."""
        valid = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
        unknown = sorted(set(params) - set(valid))
        if unknown:
            raise TypeError(f"task.params: unknown key(s) {unknown} for task {cls.name!r}; "
                            f"valid keys: {valid}")
        cls(**params)

    def _draw(self, rng: random.Random) -> Any:
        raise NotImplementedError

    def _prompt(self, values: Any) -> str:
        raise NotImplementedError

    def _problem(self, values: Any, rng: random.Random, index: int) -> Problem:
        raise NotImplementedError

    def _stream_problem(self, stream: str, index: int) -> Problem:
        if index < 0:
            raise ValueError(f"problem index must be >= 0, got {index}")
        rng = random.Random(f"{self.name}:{self.seed}:{stream}:{index}")
        want_eval = stream == "eval"
        for _ in range(10_000):
            values = self._draw(rng)
            if in_eval_partition(self._prompt(values), self.eval_fraction) == want_eval:
                return self._problem(values, rng, index)
        raise RuntimeError(  # only reachable with a tiny problem space
            f"could not draw a {stream} problem for index {index}; the problem space is too "
            f"small for task.params.eval_fraction ({self.space_hint})")

    def problem(self, index: int) -> Problem:
        return self._stream_problem("train", index)

    def eval_problems(self, n: int) -> list[Problem]:
        return [self._stream_problem("eval", i) for i in range(n)]

    def score(self, problem: Problem, response: str) -> float:
        got = parse_answer(response)
        return 1.0 if got is not None and got == int(problem.answer) else 0.0

    def corpus(self, n: int) -> list[str]:
        return [p.prompt + p.solution for p in (self.problem(i) for i in range(n))]
