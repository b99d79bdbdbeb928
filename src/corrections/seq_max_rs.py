"""RS level `seq_max` (seq_max_k2, seq_max_k3): a response kept or rejected on its largest
token estimate (verl has no seq_max_k1: -log r has no one-sided worst case)."""

import torch
from torch import Tensor

from src.corrections._base import register_rs


@register_rs("seq_max", "each response on its largest token estimate", divergences=("k2", "k3"))
def seq_max_statistic(divergence: Tensor, mask: Tensor) -> Tensor:
    top = divergence.masked_fill(~mask, float("-inf")).max(dim=-1).values
    return torch.where(torch.isinf(top), torch.zeros_like(top), top)  # a response with no token: 0
