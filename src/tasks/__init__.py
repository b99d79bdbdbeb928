"""Task registry: `get_task("arithmetic", seed=0, max_terms=5)`."""

from __future__ import annotations

from typing import Any

from src.registry import provide
from src.tasks.arithmetic import ArithmeticTask
from src.tasks.base import Problem, Task
from src.tasks.guess_check import GuessCheckTask
from src.tasks.math_dataset import GSM8KTask, Math500Task, MathDatasetTask
from src.tasks.rewards import REWARD_SOURCES

TASKS: dict[str, type] = {
    ArithmeticTask.name: ArithmeticTask,
    # Guess and check: failing responses can run longer than correct ones (BAPO's premise).
    GuessCheckTask.name: GuessCheckTask,
    # GPU tasks: datasets from local files or the HF hub, scored with math-verify.
    GSM8KTask.name: GSM8KTask,
    Math500Task.name: Math500Task,
    MathDatasetTask.name: MathDatasetTask,
}
# What the config's checks read (src/registry.py): task names (their check_params), rewards.
provide("tasks", TASKS)
provide("tasks.rewards", REWARD_SOURCES)


def get_task(name: str, **cfg: Any) -> Task:
    """Build a task by registry name; unknown names and keys fail with the valid choices."""
    if name not in TASKS:
        raise ValueError(f"task.name must be one of {sorted(TASKS)}, got {name!r}")
    return TASKS[name](**cfg)


__all__ = ["TASKS", "Problem", "Task", "get_task"]
