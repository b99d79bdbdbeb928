"""The clipped PPO surrogate that ppo, clip_higher, top_entropy, bapo and clip_cov share."""

from __future__ import annotations

from dataclasses import dataclass

from src.algorithms._checks import check_bounds
from src.algorithms.methods._base import Inputs, MethodParams, TokenObjective
from src.algorithms.surrogate import clip_states, clipped_surrogate
from src.config_fields import above, or_none, setting

DUAL_HELP = ("dual-clip constant c > 1: for A<0, J = max(J, c A) (state `dual`, no gradient); "
             "null: off")
# dual_clip_c's check, for every method that has one
DUAL_CHECK = or_none(above(1, "or None to disable"))


@dataclass
class ClipParams(MethodParams):
    """Fixed absolute ratio bounds [c_low, c_high] (PPO's [1 - eps, 1 + eps]) and dual-clip."""

    c_low: float = setting(0.8, "lower ratio bound: A<0 tokens with r < c_low get no gradient",
                           source="PPO/GRPO eps = 0.2")
    c_high: float = setting(1.2, "upper ratio bound: A>0 tokens with r > c_high get no gradient",
                            source="PPO/GRPO eps = 0.2")
    dual_clip_c: float | None = setting(None, DUAL_HELP, DUAL_CHECK)

    def validate(self) -> None:
        check_bounds(self.c_low, self.c_high)


def clipped_objective(x: Inputs, c_low: float, c_high: float, dual_clip_c: float | None,
                      in_loss=None) -> TokenObjective:
    """J_t = min(r A, clip(r) A) (dual-clipped when on) on every response token, or on
    `in_loss` only; the gradient weight is r on the tokens left in state `none`."""
    state = clip_states(x.ratio, x.advantages, c_low, c_high, dual_clip_c)
    value = clipped_surrogate(x.ratio, x.advantages, state, c_low, c_high, dual_clip_c)
    return TokenObjective(value, state, x.ratio.detach(), x.mask if in_loss is None else in_loss,
                          c_low, c_high)
