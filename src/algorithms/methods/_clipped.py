"""The clipped PPO surrogate that ppo, clip_higher, top_entropy, bapo and clip_cov share."""

from __future__ import annotations

from dataclasses import dataclass

from src.algorithms._checks import check_bounds, check_dual_clip
from src.algorithms.methods._base import Inputs, MethodParams, TokenObjective, param
from src.algorithms.surrogate import clip_states, clipped_surrogate

DUAL_HELP = ("dual-clip constant c > 1: for A<0, J = max(J, c A) (state `dual`, no gradient); "
             "null: off")


@dataclass
class ClipParams(MethodParams):
    """Fixed absolute ratio bounds [c_low, c_high] (PPO's [1 - eps, 1 + eps]) and dual-clip."""

    c_low: float = param(0.8, "lower ratio bound: A<0 tokens with r < c_low get no gradient",
                         "PPO/GRPO eps = 0.2")
    c_high: float = param(1.2, "upper ratio bound: A>0 tokens with r > c_high get no gradient",
                          "PPO/GRPO eps = 0.2")
    dual_clip_c: float | None = param(None, DUAL_HELP)

    def validate(self) -> None:
        check_bounds(self.c_low, self.c_high)
        check_dual_clip(self.dual_clip_c)


def clipped_objective(x: Inputs, c_low: float, c_high: float, dual_clip_c: float | None,
                      in_loss=None) -> TokenObjective:
    """J_t = min(r A, clip(r) A) (dual-clipped when on) on every response token, or on
    `in_loss` only; the gradient weight is r on the tokens left in state `none`."""
    state = clip_states(x.ratio, x.advantages, c_low, c_high, dual_clip_c)
    value = clipped_surrogate(x.ratio, x.advantages, state, c_low, c_high, dual_clip_c)
    return TokenObjective(value, state, x.ratio.detach(), x.mask if in_loss is None else in_loss,
                          c_low, c_high)
