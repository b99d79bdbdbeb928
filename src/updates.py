"""How many optimizer updates one rollout makes, and the data age in updates that gives.

Plain functions of the train config (`train.staleness`, `train.staleness_mode`,
`train.epochs`), in plain Python: no torch (a test checks), so analysis/ reads a run's lag
with the functions the trainer and the optimizer's warmup count updates with
(src/schedule/split.py says how the updates are made).
"""

from __future__ import annotations

STALENESS_MODES = ("minibatch", "fixed_update", "epochs")
SPLITS = ("responses", "groups")  # what a mini-batch draws: responses, or whole prompt groups


def rollout_prompts(train) -> int:
    """Prompts sampled per rollout: k * prompts_per_step in fixed_update mode."""
    k = train.staleness if train.staleness_mode == "fixed_update" else 1
    return train.prompts_per_step * k


def minibatch_size(train) -> int:
    """Responses per optimizer update."""
    return rollout_prompts(train) * train.group_size // minibatch_count(train)


def minibatch_count(train) -> int:
    """Mini-batches one pass over a rollout is split into."""
    return 1 if train.staleness_mode == "epochs" else train.staleness


def passes_per_rollout(train) -> int:
    """Passes over a rollout's mini-batches: staleness in epochs mode, else train.epochs."""
    return train.staleness if train.staleness_mode == "epochs" else train.epochs


def updates_per_rollout(train) -> int:
    return minibatch_count(train) * passes_per_rollout(train)


def lag_range(delay: int, updates: int) -> tuple[int, int]:
    """[low, high] lag in optimizer updates of a step's data, for data generated `delay`
    steps before it is trained on with `updates` updates a step: update j of the step sees
    data `delay * updates + j` updates old. The fresh source is delay 0 (0 .. k-1), a delay
    queue of K steps gives K*k .. K*k+k-1 (docs/offpolicy.md)."""
    return delay * updates, delay * updates + updates - 1
