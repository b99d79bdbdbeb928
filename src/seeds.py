"""The run's seeds: each a function of the config's `seed` and where the run is, never of
earlier draws, so a resumed run draws exactly what the uninterrupted one would have.

- `step_seed(seed, step)`: the step's own seed. The rollout of slot s samples with
  `step_seed(seed, s)`, a rollout's mini-batch split is drawn from the seed of the step that
  trains it (src/schedule/split.py `minibatch_rows`), a source's other draws add an offset to
  it (`Generation.seed`), and the token rows a run dir keeps are drawn from it plus one.
- `update_seed(seed, step, update)`: a method's random decision at one update (clip_cov's
  draw of the tokens it clips).

The evaluator's sampling seed (`seed + 12_345`, src/build.py) and the warm start's
(`model.warm_start_seed`) are their own.
"""

from __future__ import annotations

MODULUS = 2**31 - 1


def step_seed(seed: int, step: int) -> int:
    """The seed of `step` (or of the slot whose problems a rollout holds)."""
    return (seed * 1_000_003 + step * 7_919) % MODULUS


def update_seed(seed: int, step: int, update: int) -> int:
    """The seed of a method's random decision at update `update` of `step`."""
    return (step_seed(seed, step) + 104_729 * (update + 1)) % MODULUS
