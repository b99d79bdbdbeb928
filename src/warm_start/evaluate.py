"""The warm start's evaluation: greedy and sampled accuracy on held-out problems, by
difficulty, with the lengths of the sampled responses and of the reference solutions."""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from transformers import PreTrainedModel, PreTrainedTokenizerFast

from src.models.sampling import generate
from src.tasks.base import Problem, Task


def evaluate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerFast,
    task: Task,
    problems: list[Problem],
    *,
    num_samples: int,
    temperature: float,
    max_new_tokens: int,
    seed: int,
    progress: bool = False,
) -> dict[str, Any]:
    """Greedy and sampled accuracy on `problems`, overall and by difficulty, plus the
    token-length distribution of sampled responses and of the reference solutions."""
    prompts = [p.prompt for p in problems]
    greedy = generate(
        model, tokenizer, prompts, num_samples=1, max_new_tokens=max_new_tokens, greedy=True,
        progress="warm start eval, greedy" if progress else None,
    )
    sampled = generate(
        model,
        tokenizer,
        prompts,
        num_samples=num_samples,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        seed=seed,
        progress="warm start eval, sampled" if progress else None,
    )
    by_diff = _by_difficulty(tokenizer, task, problems, greedy, sampled)
    all_sampled = [task.score(problems[g.prompt_index], g.text) for g in sampled]
    return {
        "greedy_accuracy": mean([task.score(problems[g.prompt_index], g.text) for g in greedy]),
        "sampled_accuracy": mean(all_sampled),
        "eval_temperature": temperature,
        "finished_fraction": mean([float(g.finished) for g in sampled]),
        "response_length": dist([len(g.token_ids) for g in sampled]),
        "by_difficulty": {
            str(d): {
                "n_problems": len(v["greedy"]),
                "greedy_accuracy": mean(v["greedy"]),
                "sampled_accuracy": mean(v["sampled"]),
                "finished_fraction": mean(v["finished"]),
                "sampled_length": dist(v["sampled_len"]),
                "reference_length": dist(v["ref_len"]),
            }
            for d, v in sorted(by_diff.items())
        },
    }



def _by_difficulty(tokenizer: PreTrainedTokenizerFast, task: Task, problems: list[Problem],
                   greedy: list, sampled: list) -> dict[int, dict[str, list[float]]]:
    """Per difficulty: greedy and sampled scores, sampled lengths and whether they ended, and
    the reference solutions' lengths (+ EOS)."""
    ref_ids = tokenizer([p.solution for p in problems], add_special_tokens=False)["input_ids"]
    ref_lens = [len(ids) + 1 for ids in ref_ids]  # + EOS
    by_diff: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for g in greedy:
        p = problems[g.prompt_index]
        by_diff[p.difficulty]["greedy"].append(task.score(p, g.text))
    for g in sampled:
        p = problems[g.prompt_index]
        by_diff[p.difficulty]["sampled"].append(task.score(p, g.text))
        by_diff[p.difficulty]["sampled_len"].append(len(g.token_ids))
        by_diff[p.difficulty]["finished"].append(float(g.finished))
    for p, n in zip(problems, ref_lens, strict=True):
        by_diff[p.difficulty]["ref_len"].append(n)
    return by_diff


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def dist(xs: list[float]) -> dict[str, float]:
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs)}
