"""Choose libgomp's wait policy at start from the load average, before torch is imported.

Why: torch's CPU ops run on libgomp threads that spin between ops (300000 spins by default)
instead of sleeping. On an idle machine that spin is the fastest setting; on a machine where
another job uses a core, the spinning threads fight it for the cores and a training step was
4-12x slower (benchmarks/README.md: the OpenMP wait policy). A bounded spin loses little there.
So: when the 1-minute load average before this process says another job is running
(>= BUSY_LOAD), GOMP_SPINCOUNT is set to BOUNDED_SPIN; on an idle machine nothing is set.

libgomp reads its environment once, when it is loaded, so this must run before the first
`import torch` (the entry points' `pin_process()`, src/pinning.py). Waiting changes no arithmetic, so every number is the
same under either setting. A setting the user made (GOMP_SPINCOUNT or OMP_WAIT_POLICY in
the environment) always wins.
"""

from __future__ import annotations

import os

BUSY_LOAD = 0.5  # runnable processes, averaged over a minute, not counting this one
BOUNDED_SPIN = "10000"
USER_SETTINGS = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")
# What was decided, for meta.json: {"GOMP_SPINCOUNT": ..., "reason": ...}.
CHOICE: dict[str, str | None] = {}


def choose_wait_policy(environ=os.environ, load: float | None = None) -> dict[str, str | None]:
    """Set GOMP_SPINCOUNT in `environ` on a busy machine; returns what was decided and why."""
    user = {k: environ[k] for k in USER_SETTINGS if k in environ}
    if user:
        choice = {"GOMP_SPINCOUNT": user.get("GOMP_SPINCOUNT"),
                  "OMP_WAIT_POLICY": user.get("OMP_WAIT_POLICY"), "reason": "set by the user"}
    else:
        if load is None:
            try:
                load = os.getloadavg()[0]
            except OSError:  # no load average on this platform: keep libgomp's default
                load = 0.0
        if load >= BUSY_LOAD:
            environ["GOMP_SPINCOUNT"] = BOUNDED_SPIN
            choice = {"GOMP_SPINCOUNT": BOUNDED_SPIN, "OMP_WAIT_POLICY": None,
                      "reason": f"load average {load:.2f} >= {BUSY_LOAD}: bounded spin"}
        else:
            choice = {"GOMP_SPINCOUNT": None, "OMP_WAIT_POLICY": None,
                      "reason": f"load average {load:.2f} < {BUSY_LOAD}: libgomp's default spin"}
    CHOICE.clear()
    CHOICE.update(choice)
    return choice
