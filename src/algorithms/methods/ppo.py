"""ppo: the GRPO/PPO clipped surrogate with fixed bounds [0.8, 1.2] (the paper's baseline)."""

from __future__ import annotations

from dataclasses import dataclass

from src.algorithms.methods._base import Decision, Inputs, Method, TokenObjective, register
from src.algorithms.methods._clipped import ClipParams, clipped_objective


@dataclass
class PpoParams(ClipParams):
    """c_low / c_high default to PPO's [1 - 0.2, 1 + 0.2]."""


@register
class Ppo(Method):
    """J_t = min(r A, clip(r, c_low, c_high) A) on every response token."""

    name = "ppo"
    Params = PpoParams

    def token_objective(self, x: Inputs, decision: Decision) -> TokenObjective:
        p = self.params
        return clipped_objective(x, p.c_low, p.c_high, p.dual_clip_c)
