"""verl's own policy losses, for tests that hold a method against verl's implementation.

`verl_policy_loss(...)` skips the calling test when verl (and ray) are not installed, as
tests/integrations/test_verl_plug.py does.
"""

from __future__ import annotations

import pytest
from torch import Tensor

POLICY_LOSS_KEYS = ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio", "ppo_kl_coef")


def verl_policy_loss(loss_mode: str, old: Tensor, logp: Tensor, adv: Tensor, mask: Tensor,
                     agg: str = "token-mean", **config) -> Tensor:
    """verl's registered `loss_mode` on one micro-batch (per-token advantages), its loss.

    `config`: ActorConfig fields (clip_ratio_low, ...) and PolicyLossConfig fields
    (clip_cov_ratio, kl_cov_ratio, ppo_kl_coef, ...).
    """
    pytest.importorskip("ray")
    core = pytest.importorskip("verl.trainer.ppo.core_algos")
    if loss_mode not in core.POLICY_LOSS_REGISTRY:
        pytest.skip(f"the installed verl has no policy loss {loss_mode!r}")
    from verl.workers.config import ActorConfig, PolicyLossConfig

    policy = {k: config.pop(k) for k in list(config) if k in POLICY_LOSS_KEYS}
    actor = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=2,
                        policy_loss=PolicyLossConfig(loss_mode=loss_mode, **policy), **config)
    out = core.POLICY_LOSS_REGISTRY[loss_mode](
        old_log_prob=old, log_prob=logp, advantages=adv, response_mask=mask, loss_agg_mode=agg,
        config=actor)
    return out[0]
