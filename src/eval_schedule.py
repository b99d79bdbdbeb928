"""When a run evaluates, and on how many held-out problems.

Plain functions of the eval section (`eval.every`, `eval.at`, `eval.final_problems`) and
`train.steps`, no torch: the trainer, the evaluator and the preflight read the same schedule.

- The steps: step 0 (the warm start), then `eval.at` when it is given, else every `eval.every`
  steps and the run's last step.
- The final window: the last FINAL_WINDOW evals after step 0, which the final accuracy
  averages (docs/statistics.md). With `eval.final_problems` those evals, and step 0's (the
  start it is compared with), run on that many held-out problems, the others on
  `task.eval_problems`: a sparse, cheap curve, and a precise start and end.
"""

from __future__ import annotations

FINAL_WINDOW = 3  # the evals the final accuracy averages (analysis/core/final.py; src/committed.py reads it)


def eval_steps(eval_cfg, steps: int) -> list[int]:
    """Every step (rollouts done) the run evaluates at, step 0 first."""
    if eval_cfg.at is not None:
        return [0, *eval_cfg.at]
    every = eval_cfg.every
    return [0, *range(every, steps, every), steps] if steps else [0]


def final_window(eval_cfg, steps: int) -> set[int]:
    """The steps whose evals the final accuracy averages, and step 0."""
    after_start = eval_steps(eval_cfg, steps)[1:]
    return {0, *after_start[-FINAL_WINDOW:]}


def at_problem(eval_cfg, task_eval_problems: int, steps: int, step: int) -> int:
    """How many held-out problems the eval at `step` runs on."""
    if eval_cfg.final_problems is not None and step in final_window(eval_cfg, steps):
        return eval_cfg.final_problems
    return task_eval_problems


def check_at(at: list | None, steps: int) -> str | None:
    """What is wrong with `eval.at` for a run of `steps` steps, or None."""
    if at is None:
        return None
    if not at or any(not isinstance(s, int) or isinstance(s, bool) for s in at):
        return f"must be null or a non-empty list of steps, got {at}"
    if sorted(set(at)) != list(at) or at[0] < 1 or at[-1] != steps:
        return (f"must be increasing steps in 1..train.steps ending at train.steps={steps} (the "
                f"run's end is always evaluated), got {at}")
    return None
