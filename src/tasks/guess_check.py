"""Find the missing addend by guess and check: `?+7=19` -> `5+7=12 low, 14+7=21 high,
12+7=19. Answer: 12`.

Why this task: the lag sweeps on chain sums found the positive-token share near 0.5 at every
lag, because a chain sum's responses to one problem are about as long whether right or
wrong (its length is fixed by the term count). BAPO's premise is the opposite: failing
responses run long. Here the worked solution is a search: guess, add, say whether the sum is
low or high, guess again inside the range that is left, and answer when the sum hits. A
policy that searches badly needs more guesses; past the response budget it is cut off
without an answer and fails. So, unlike chain sums, failing responses to the same problem
can be longer than correct ones, and whether they are is measured, not assumed
(experiments/calibration/length_balance.py).

Reference solutions search at random: each guess is uniform over the values the earlier
answers leave open, redrawn (with the same problem) until at most `max_guesses` guesses find
it, so every worked solution fits the response budget. Difficulty is the number of guesses
the reference took. Streams, the held-out partition and the verifier are the procedural
tasks' (src/tasks/procedural.py); the problem space is small (max_value * max_addend prompts), so the
held-out stream repeats its prompts, each time with a fresh draw of the sampled responses.
"""

from __future__ import annotations

import random
from typing import Any

from src.tasks.base import Problem
from src.tasks.procedural import ANSWER_TAG, ProceduralTask


class GuessCheckTask(ProceduralTask):
    """`?+b=c` solved by guessing x, with a binary verifier on the final answer."""

    name = "guess_check"
    space_hint = "raise task.params.max_value or max_addend"

    def __init__(self, seed: int = 0, max_value: int = 20, max_addend: int = 9,
                 max_guesses: int = 5, eval_fraction: float = 0.2,
                 ramble_fraction: float = 0.0, ramble_guesses: int = 12) -> None:
        """
        Args:
            seed: selects the problem streams and the reference searches.
            max_value: the missing addend x is in 1..max_value.
            max_addend: the given addend b is in 1..max_addend.
            max_guesses: the longest reference search (its solution must fit the response
                budget: about 8 tokens a guess with the project tokenizer).
            eval_fraction: share of the prompts reserved for the held-out stream.
            ramble_fraction: share of the worked solutions (what the warm start imitates)
                that are searches that fail to stop: `ramble_guesses` guesses that ignore
                the low/high answers and never hit x, with no answer, longer than the
                response budget. A policy that imitates them runs until it is cut off, so
                failing responses are long; RL can learn to follow the answers instead.
            ramble_guesses: the length of such a search, in guesses (~8 tokens each).
        """
        if max_value < 2:
            raise ValueError(f"task.params.max_value must be >= 2, got {max_value}")
        if max_addend < 1:
            raise ValueError(f"task.params.max_addend must be >= 1, got {max_addend}")
        if max_guesses < 1:
            raise ValueError(f"task.params.max_guesses must be >= 1, got {max_guesses}")
        if not 0.0 < eval_fraction < 0.5:
            raise ValueError(f"task.params.eval_fraction must be in (0, 0.5), got {eval_fraction}")
        if not 0.0 <= ramble_fraction < 1.0:
            raise ValueError(f"task.params.ramble_fraction must be in [0, 1), got {ramble_fraction}")
        if ramble_guesses < 1:
            raise ValueError(f"task.params.ramble_guesses must be >= 1, got {ramble_guesses}")
        self.ramble_fraction = float(ramble_fraction)
        self.ramble_guesses = int(ramble_guesses)
        self.seed = int(seed)
        self.max_value = int(max_value)
        self.max_addend = int(max_addend)
        self.max_guesses = int(max_guesses)
        self.eval_fraction = float(eval_fraction)

    @property
    def config(self) -> dict[str, Any]:
        config = {"name": self.name, "seed": self.seed, "max_value": self.max_value,
                  "max_addend": self.max_addend, "max_guesses": self.max_guesses,
                  "eval_fraction": self.eval_fraction}
        if self.ramble_fraction:  # named only when used: the other builds keep their keys
            config.update(ramble_fraction=self.ramble_fraction, ramble_guesses=self.ramble_guesses)
        return config

    # --- generation ---------------------------------------------------------------------

    def search(self, x: int, rng: random.Random) -> list[int]:
        """Guesses of one random search for x over 1..max_value, ending at x, with at most
        max_guesses guesses (a longer search is redrawn)."""
        while True:
            lo, hi, guesses = 1, self.max_value, []
            while not guesses or guesses[-1] != x:
                g = rng.randint(lo, hi)
                guesses.append(g)
                lo, hi = (g + 1, hi) if g < x else (lo, g - 1) if g > x else (lo, hi)
            if len(guesses) <= self.max_guesses:
                return guesses

    @staticmethod
    def solution(guesses: list[int], addend: int, total: int) -> str:
        steps = []
        for g in guesses:
            s = g + addend
            steps.append(f"{g}+{addend}={s}" + (" low" if s < total else " high" if s > total else ""))
        return ", ".join(steps) + f". {ANSWER_TAG} {guesses[-1]}"

    def _draw(self, rng: random.Random) -> tuple[int, int]:
        return rng.randint(1, self.max_value), rng.randint(1, self.max_addend)

    def _prompt(self, values: tuple[int, int]) -> str:
        x, b = values
        return f"?+{b}={x + b}\n"

    def ramble(self, x: int, rng: random.Random) -> list[int]:
        """A search that fails to stop: guesses anywhere but x, whatever the answers said."""
        others = [v for v in range(1, self.max_value + 1) if v != x]
        return [rng.choice(others) for _ in range(self.ramble_guesses)]

    def _problem(self, values: tuple[int, int], rng: random.Random, index: int) -> Problem:
        x, b = values
        if self.ramble_fraction and rng.random() < self.ramble_fraction:
            guesses = self.ramble(x, rng)
            steps = self.solution(guesses, b, x + b).split(f". {ANSWER_TAG}")[0]
            return Problem(prompt=self._prompt(values), answer=str(x), solution=steps + ",",
                           difficulty=len(guesses), index=index)
        guesses = self.search(x, rng)
        return Problem(prompt=self._prompt(values), answer=str(x),
                       solution=self.solution(guesses, b, x + b), difficulty=len(guesses),
                       index=index)
