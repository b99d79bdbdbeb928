"""Group-normalised (GRPO) advantages."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class GroupAdvantages:
    advantages: Tensor  # [B], one per response
    degenerate_groups: int  # groups whose rewards are all equal: they carry no gradient
    num_groups: int


def group_advantages(
    rewards: Tensor, group_size: int, *, scale_by_std: bool = True, eps: float = 1e-6
) -> GroupAdvantages:
    """`A_i = (R_i - mean_g R) / (std_g R + eps)`; `scale_by_std=False` is Dr. GRPO.

    Responses are laid out group-major: rows `[g*G, (g+1)*G)` share a prompt.
    The std is the unbiased sample std, as in TRL and verl.
    """
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [B], got shape {tuple(rewards.shape)}")
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2 for group baselines, got {group_size}")
    if rewards.numel() == 0 or rewards.numel() % group_size:
        raise ValueError(
            f"rewards has {rewards.numel()} entries, not a positive multiple of "
            f"group_size={group_size}"
        )
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError("rewards contains NaN or inf; check the verifier")
    grouped = rewards.double().view(-1, group_size)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    # Exact zero for equal-reward groups, so no float residue leaks a gradient in.
    degenerate = (grouped == grouped[:, :1]).all(dim=1)
    centred = torch.where(degenerate[:, None], torch.zeros_like(centred), centred)
    if scale_by_std:
        centred = centred / (grouped.std(dim=1, keepdim=True) + eps)
    return GroupAdvantages(
        advantages=centred.view(-1).to(rewards.dtype if rewards.is_floating_point() else torch.float32),
        degenerate_groups=int(degenerate.sum()),
        num_groups=grouped.shape[0],
    )
