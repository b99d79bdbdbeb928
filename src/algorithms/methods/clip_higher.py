"""clip_higher: DAPO's decoupled clip, bounds [1 - 0.2, 1 + 0.28]."""

from __future__ import annotations

from dataclasses import dataclass

from src.algorithms.methods._base import register
from src.algorithms.methods._clipped import ClipParams
from src.algorithms.methods.ppo import Ppo
from src.config_fields import setting


@dataclass
class ClipHigherParams(ClipParams):
    c_high: float = setting(1.28, "upper ratio bound: A>0 tokens with r > c_high get no gradient",
                            source="DAPO (Yu et al. 2025, arXiv 2503.14476) eps_high = 0.28")


@register
class ClipHigher(Ppo):
    """The ppo surrogate with DAPO's raised upper bound."""

    name = "clip_higher"
    Params = ClipHigherParams
