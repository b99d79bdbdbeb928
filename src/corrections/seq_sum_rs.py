"""RS level `seq_sum` (seq_sum_k1/k2/k3): a response kept or rejected on the sum of its
tokens' estimates; seq_sum_k1 bounds the sequence ratio (verl's Seq-MIS)."""

from torch import Tensor

from src.corrections._base import masked_sum, register_rs


@register_rs("seq_sum", "each response on the sum of its tokens' estimates")
def seq_sum_statistic(divergence: Tensor, mask: Tensor) -> Tensor:
    return masked_sum(divergence, mask, dim=-1)
