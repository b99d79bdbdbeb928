"""The torch device a config's `device` names (cpu | cuda | cuda:N | auto).

Its own module because both the machine checks (src/preflight.py: does the sampler's
precision run there, which compiler does inductor need) and the run's wiring (src/build.py)
ask it.
"""

from __future__ import annotations

import torch


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device={name} but torch sees no CUDA device; use device=cpu")
    return torch.device(name)
