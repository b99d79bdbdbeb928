"""bapo-repro: off-policy RL objectives for language models, with per-token telemetry."""

import os

# How long torch's OpenMP threads spin before they sleep. libgomp's default (300000 spins,
# milliseconds) holds both cores of a 2-core machine between every op, which on a machine
# shared with other jobs made training steps 4.7x slower; OMP_WAIT_POLICY=PASSIVE (no spin)
# makes every op pay a wake-up instead. A bounded spin covers the gaps between the ops of
# one forward pass and sleeps through longer ones (README, Benchmarks, has the numbers).
# Set before torch loads its OpenMP runtime; an explicit setting of either variable wins.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")
