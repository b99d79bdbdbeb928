"""bapo-repro: off-policy RL objectives for language models, with per-token telemetry."""

# The CPU instruction set the math kernels dispatch to (src/_numerics.py): pinned to AVX2 in
# the default portable mode, so a run gives the same numbers on any x86-64 CPU. Read once,
# when torch loads, so it must run before the first `import torch`.
from src._numerics import pin_numerics

pin_numerics()

# libgomp's wait policy from the load average (src/_wait_policy.py): its default spin on an
# idle machine, a bounded spin on a busy one. Must run before the first `import torch`.
from src._wait_policy import choose_wait_policy  # noqa: E402

choose_wait_policy()

from src._malloc import keep_freed_memory  # noqa: E402 - after the wait policy, as it must be

keep_freed_memory()  # glibc keeps freed memory for reuse: 1.10x a step, same numbers (src/_malloc.py)
