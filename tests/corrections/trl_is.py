"""TRL's vLLM importance-sampling correction, transcribed literally as the tests' oracle.

huggingface/trl at f2cd57710ae345ea6428ae95363267fcf38a3dc8, trl/trainer/grpo_trainer.py,
`GRPOTrainer._generate_and_score_completions` (the block under
`if self.use_vllm and self.vllm_importance_sampling_correction`), with `self.` settings as
arguments and `tool_mask` None; the loss multiplies the per-token loss by the result
(`per_token_loss = per_token_loss * inputs["importance_sampling_ratio"]`) and keeps the
completion mask. Defaults: trl/trainer/grpo_config.py (mode "sequence_mask", clip_max 3.0,
clip_min None).
"""
# ruff: noqa
import math

import torch


def vllm_importance_sampling_ratio(old_per_token_logps, sampling_per_token_logps, completion_mask,
                                   vllm_importance_sampling_mode="sequence_mask",
                                   vllm_importance_sampling_clip_min=None,
                                   vllm_importance_sampling_clip_max=3.0):
    tool_mask = None
    mask = completion_mask if tool_mask is None else completion_mask * tool_mask
    per_token_logps_diff = (old_per_token_logps - sampling_per_token_logps) * mask

    sequence_level_is = vllm_importance_sampling_mode in ["sequence_mask", "sequence_truncate"]
    if sequence_level_is:
        per_sequence_logps_diff = per_token_logps_diff.sum(dim=-1, keepdim=True)
        logps_diff = per_sequence_logps_diff
    else:
        logps_diff = per_token_logps_diff

    vllm_importance_sampling_ratio = torch.exp(logps_diff)

    if vllm_importance_sampling_mode in ["sequence_truncate", "token_truncate"]:
        vllm_importance_sampling_ratio = torch.clamp(
            vllm_importance_sampling_ratio,
            min=vllm_importance_sampling_clip_min,
            max=vllm_importance_sampling_clip_max,
        )
    elif vllm_importance_sampling_mode in ["sequence_mask", "token_mask"]:
        min_val = (
            vllm_importance_sampling_clip_min
            if vllm_importance_sampling_clip_min is not None
            else -math.inf
        )
        max_val = (
            vllm_importance_sampling_clip_max
            if vllm_importance_sampling_clip_max is not None
            else math.inf
        )

        invalid_mis_mask = (vllm_importance_sampling_ratio < min_val) | (
            vllm_importance_sampling_ratio > max_val
        )
        vllm_importance_sampling_ratio = vllm_importance_sampling_ratio.masked_fill(
            invalid_mis_mask, value=0.0
        )
    else:
        raise ValueError(
            f"Unknown vLLM importance sampling level: {vllm_importance_sampling_mode}. Possible values are 'token_truncate', 'token_mask', 'sequence_truncate', and 'sequence_mask'."
        )
    return vllm_importance_sampling_ratio
