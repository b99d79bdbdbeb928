"""Chain sums with worked solutions: `12+7+5=?` -> `12+7=19, 19+5=24. Answer: 24`.

Why our own generator and not reasoning-gym's `chain_sum` (reasoning-gym is not a dependency,
for this reason): reasoning-gym gives the question
and the final answer only, and the warm start needs a worked solution as its SFT target.
The running partial sums make the response length grow with the number of terms, which is
the length effect the paper's positive/negative-response analysis needs, and they make each
step a small, learnable operation for a tiny model.

Defaults: 2..7 one-digit terms, uniform over the term count. With the project tokenizer
(one token per digit) responses are 11-13 tokens for 2 terms and 50-58 for 7 terms (EOS
included). Two-digit terms (`max_digits=2`, e.g. with `max_terms=5`: 11-53 tokens) are
harder: the tiny model learned to copy terms but not 2-digit addition within the 3-minute
CPU warm-start budget (about 15% greedy accuracy after 500 SFT steps).

Difficulty is the number of additions (terms - 1). Streams, the held-out partition and the
verifier are the procedural tasks' (src/tasks/procedural.py).

`style=chat` is the variant for a pretrained instruction-tuned model (model=smollm2-135m):
the prompt is a plain question, `What is 12 + 7 + 5? Reply with the number only.`, which the
model's chat template wraps, and the answer is the last integer of the response (`parse_last_integer`), since an
instruct model states its result in its own words (`12 + 7 + 5 = 24.`) rather than after
a tag it was never taught. The problem streams and the held-out partition are those of the
plain style (the partition hashes the plain prompt), so both styles draw the same sums.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

from src.tasks.base import Problem
from src.tasks.procedural import ANSWER_TAG, ProceduralTask, parse_answer

__all__ = ["ArithmeticTask", "parse_answer", "parse_last_integer"]

STYLES = ("plain", "chat")
# What the chat question asks for. Measured on SmolLM2-135M-Instruct (64 one-digit sums x 2
# samples at T = 1, 48 new tokens): with it 23% right and 29 tokens a response, without it
# 13% and 40 (experiments/calibration/pretrained.md).
CHAT_ASK = "Reply with the number only."
_INTEGER_RE = re.compile(r"(?<![\d.])[+-]?\d+(?![\d.])")  # not part of a decimal such as 0.5


def parse_last_integer(response: str) -> int | None:
    """The last integer of `response` (thousands separators dropped), None when it has none.

    A number with a decimal point is not an integer and is skipped: `12.5` gives nothing
    and `= 12.` gives 12 (a sentence's full stop).
    """
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", response)
    text = re.sub(r"\.(?=\s|$)", " ", text)  # a full stop is not a decimal point
    found = [m.group(0) for m in _INTEGER_RE.finditer(text)]
    return int(found[-1]) if found else None


class ArithmeticTask(ProceduralTask):
    """Procedural chain sums with a binary verifier on the final answer."""

    name = "arithmetic"
    space_hint = "raise task.params.max_digits or max_terms"

    def __init__(
        self,
        seed: int = 0,
        min_terms: int = 2,
        max_terms: int = 7,
        max_digits: int = 1,
        mix: Sequence[float] | None = None,
        eval_fraction: float = 0.1,
        style: str = "plain",
        max_value: int | None = None,
    ) -> None:
        """
        Args:
            seed: selects the problem streams.
            min_terms, max_terms: number of terms per problem (inclusive range, >= 2).
            max_digits: each term has 1..max_digits digits (digit count drawn uniformly,
                then the value uniformly among numbers with that many digits).
            mix: relative weights of the term counts min_terms..max_terms (the difficulty
                mix); None means uniform.
            eval_fraction: share of the problem space reserved for the held-out stream.
            max_value: each term uniform in 1..max_value instead of the digit-count draw
                (None: max_digits decides); e.g. 20 for sums a small pretrained model
                gets right some of the time.
            style: plain (`12+7+5=?` and the strict `Answer:` verifier, for the tiny model)
                or chat (`What is 12 + 7 + 5? Reply with the number only.`, scored by the
                response's last integer, for a
                pretrained instruct model under its chat template).
        """
        if min_terms < 2:
            raise ValueError(f"task.params.min_terms must be >= 2, got {min_terms}")
        if max_terms < min_terms:
            raise ValueError(
                f"task.params.max_terms must be >= task.params.min_terms ({min_terms}), "
                f"got {max_terms}"
            )
        if not 1 <= max_digits <= 6:
            raise ValueError(f"task.params.max_digits must be in [1, 6], got {max_digits}")
        n_levels = max_terms - min_terms + 1
        weights = [1.0] * n_levels if mix is None else [float(w) for w in mix]
        if len(weights) != n_levels:
            raise ValueError(
                f"task.params.mix needs one weight per term count {min_terms}..{max_terms} "
                f"({n_levels} weights), got {len(weights)}"
            )
        if any(w < 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(f"task.params.mix weights must be >= 0 with a positive sum, got {weights}")
        if not 0.0 < eval_fraction < 0.5:
            raise ValueError(f"task.params.eval_fraction must be in (0, 0.5), got {eval_fraction}")
        if max_value is not None and not 2 <= max_value <= 10**6:
            raise ValueError(f"task.params.max_value must be null or in [2, 1000000], got {max_value}")
        self.max_value = None if max_value is None else int(max_value)
        if style not in STYLES:
            raise ValueError(f"task.params.style must be one of {list(STYLES)}, got {style!r}")
        self.style = style
        self.seed = int(seed)
        self.min_terms = int(min_terms)
        self.max_terms = int(max_terms)
        self.max_digits = int(max_digits)
        self.mix = weights
        self.eval_fraction = float(eval_fraction)

    @property
    def config(self) -> dict[str, Any]:
        config = {
            "name": self.name,
            "seed": self.seed,
            "min_terms": self.min_terms,
            "max_terms": self.max_terms,
            "max_digits": self.max_digits,
            "mix": list(self.mix),
            "eval_fraction": self.eval_fraction,
        }
        # named only when used: the builds made before these keys keep their cache keys
        if self.max_value is not None:
            config["max_value"] = self.max_value
        if self.style != "plain":
            config["style"] = self.style
        return config

    # --- generation ---------------------------------------------------------------------

    def _draw(self, rng: random.Random) -> list[int]:
        n_terms = rng.choices(range(self.min_terms, self.max_terms + 1), weights=self.mix)[0]
        if self.max_value is not None:
            return [rng.randint(1, self.max_value) for _ in range(n_terms)]
        terms = []
        for _ in range(n_terms):
            digits = rng.randint(1, self.max_digits)
            lo = 1 if digits == 1 else 10 ** (digits - 1)
            terms.append(rng.randint(lo, 10**digits - 1))
        return terms

    def _prompt(self, terms: list[int]) -> str:
        return "+".join(map(str, terms)) + "=?\n"

    def _problem(self, terms: list[int], rng: random.Random, index: int) -> Problem:
        steps, total = [], terms[0]
        for t in terms[1:]:
            steps.append(f"{total}+{t}={total + t}")
            total += t
        if self.style == "chat":
            return Problem(prompt=f"What is {' + '.join(map(str, terms))}? {CHAT_ASK}", answer=str(total),
                           solution=" + ".join(map(str, terms)) + f" = {total}.",
                           difficulty=len(terms) - 1, index=index)
        solution = ", ".join(steps) + f". {ANSWER_TAG} {total}"
        return Problem(prompt=self._prompt(terms), answer=str(total), solution=solution,
                       difficulty=len(terms) - 1, index=index)

    def score(self, problem: Problem, response: str) -> float:
        if self.style == "plain":
            return super().score(problem, response)
        got = parse_last_integer(response)
        return 1.0 if got is not None and got == int(problem.answer) else 0.0
