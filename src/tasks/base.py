"""What every task gives the trainer: problems by index, a verifier and tokenizer text.

A task is a deterministic function of (its config, index): `problem(i)` rebuilds problem `i`
from scratch, so the trainer's position in the problem stream is a single int and resume
needs nothing else. Held-out problems come from a separate stream (`eval_problems`), and
tasks should make that stream disjoint from the training stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Problem:
    prompt: str  # what the policy sees
    answer: str  # the reference final answer (canonical text form)
    solution: str  # worked solution ending in the final answer: the SFT target
    difficulty: int  # task-specific, larger is harder (arithmetic: number of additions)
    index: int  # position in its stream (train or eval)


@runtime_checkable
class Task(Protocol):
    name: str

    @property
    def config(self) -> Mapping[str, Any]:
        """The knobs that define the problem streams (JSON-able; used in cache keys)."""
        ...

    def problem(self, index: int) -> Problem:
        """Training problem `index`; deterministic in (config, index)."""
        ...

    def score(self, problem: Problem, response: str) -> float:
        """Reward of `response` (decoded text after the prompt) for `problem`."""
        ...

    def eval_problems(self, n: int) -> list[Problem]:
        """The first `n` held-out problems, disjoint from every training problem."""
        ...

    def corpus(self, n: int) -> list[str]:
        """`n` texts (prompt + solution) for training a tokenizer."""
        ...
