"""bapo-repro: off-policy RL objectives for language models, with per-token telemetry."""

# No OpenMP wait policy is set here: on an idle 2-core machine libgomp's default spin gave
# the fastest training step (2.03 and 2.25 s against 2.16 and 2.58 s with GOMP_SPINCOUNT=10000
# in the two rounds of a quiet race; passive waiting was slower still). On a machine shared with other jobs the same spin made steps about 4x
# slower (39 s against 8-12 s); export GOMP_SPINCOUNT=10000 or OMP_WAIT_POLICY=PASSIVE there
# (README, Benchmarks).

from src._malloc import keep_freed_memory

keep_freed_memory()  # glibc keeps freed memory for reuse: 1.10x a step, same numbers (src/_malloc.py)
