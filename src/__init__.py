"""bapo-repro: off-policy RL objectives for language models, with per-token telemetry."""

import os

# OpenMP threads that spin while waiting steal the cores from every other process; on a
# shared 2-core machine that made 2-thread torch ops up to ~90x slower. Passive waiting
# costs little when the machine is idle. Set before torch loads its OpenMP runtime.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
