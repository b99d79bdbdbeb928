"""IS level `sequence`: one weight per response, the product of its tokens' ratios
(verl `rollout_is: sequence`; TRL's `sequence_*` modes; slime). AReaL, ROLL and ms-swift take
the geometric mean instead (docs/mismatch.md)."""

from torch import Tensor

from src.corrections._base import masked_sum, register_is


@register_is("sequence", "one weight per response: the product of its tokens' pi_old / mu")
def sequence_log_weight(log_ratio: Tensor, mask: Tensor) -> Tensor:
    return masked_sum(log_ratio, mask, dim=-1)[:, None]
