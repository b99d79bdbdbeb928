"""What an entry point sets in its own process before torch loads: one call, `pin_process()`.

- the numerics mode (src/_numerics.py): the CPU instruction set torch, MKL and oneDNN
  dispatch to, pinned to AVX2 in the default portable mode, so a run gives the same numbers
  on any x86-64 CPU;
- libgomp's wait policy (src/_wait_policy.py): a bounded spin on a busy machine;
- glibc's malloc thresholds (src/_malloc.py): freed memory kept for reuse.

The libraries read these once, when they load, so the call must come before the first
`import torch`. No import of `src` makes it: `python -m src.run`, experiments/run_sweep.py,
experiments/verify_cell.py, the benchmarks and the GPU check call it first thing, so that
importing `src.run_vocab`, `analysis` or a plug (src/integrations/) into another process
changes nothing there. A plug user who wants the project's numbers calls it too:

    from src.pinning import pin_process
    pin_process()  # before `import torch`
    import torch

Processes this one starts inherit the pins with the environment. A second call in the same
process changes nothing and returns the first one's choices.
"""

from __future__ import annotations

from src._malloc import keep_freed_memory
from src._numerics import pin_numerics
from src._wait_policy import choose_wait_policy

_DONE: dict = {}


def pin_process(argv: list[str] | None = None) -> dict:
    """Pin the numerics mode (from `argv`'s `numerics=...`, default the command line's, else
    REPRO_NUMERICS, else portable), then choose the wait policy, then keep freed memory, as
    one import of `src` did before; returns {"numerics", "omp_wait", "malloc"}."""
    if not _DONE:
        _DONE["numerics"] = pin_numerics(argv)
        _DONE["omp_wait"] = choose_wait_policy()
        _DONE["malloc"] = keep_freed_memory()  # after the wait policy, as it must be
    return dict(_DONE)
