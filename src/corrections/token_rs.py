"""RS level `token` (token_k1, token_k2, token_k3): each token kept or rejected on its own
divergence estimate (verl `rollout_rs: token_k*`)."""

from torch import Tensor

from src.corrections._base import register_rs


@register_rs("token", "each token on its own estimate", per_sequence=False)
def token_statistic(divergence: Tensor, mask: Tensor) -> Tensor:
    return divergence
