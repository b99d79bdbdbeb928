"""RS level `seq_mean` (seq_mean_k1/k2/k3): a response kept or rejected on the mean of its
tokens' estimates; seq_mean_k1 bounds the geometric-mean ratio (Geo-RS)."""

from torch import Tensor

from src.corrections._base import masked_mean, register_rs


@register_rs("seq_mean", "each response on the mean of its tokens' estimates (k1: Geo-RS)")
def seq_mean_statistic(divergence: Tensor, mask: Tensor) -> Tensor:
    return masked_mean(divergence, mask, dim=-1)
