"""IS level `token`: one weight per token, pi_old / mu (verl `rollout_is: token`, TIS; TRL's
`token_truncate` / `token_mask`; IcePop's masked token ratio)."""

from torch import Tensor

from src.corrections._base import register_is


@register_is("token", "one weight per token: pi_old / mu")
def token_log_weight(log_ratio: Tensor, mask: Tensor) -> Tensor:
    return log_ratio
