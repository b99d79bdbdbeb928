"""cispo, kl_cov, clip_cov, gspo, sapo, dppo_tv and dppo_kl against verl's own implementation
of each (a loss_mode the installed verl lacks is skipped: dppo came to verl in February 2026).

verl's side is its registered policy loss itself (tests/integrations/verl_reference.py calls
`verl.trainer.ppo.core_algos.POLICY_LOSS_REGISTRY[loss_mode]`; the case is skipped where
verl and ray are not installed). One seeded batch per case, 6 responses x 8 tokens, about a
fifth of the tokens masked, one advantage per response: verl's loss and ours, and their
gradients, must agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import torch

from src.algorithms import CLIP_STATES, policy_loss
from tests.integrations.verl_reference import verl_policy_loss


@dataclass(frozen=True)
class Case:
    method: str  # ours, and verl's loss_mode of the same name
    verl: dict  # verl's config: ActorConfig and PolicyLossConfig fields
    ours: dict = field(default_factory=dict)  # the method's parameters (and aggregation)
    agg: str = "token-mean"  # verl's loss_agg_mode
    old_scale: float = 2.0  # old log-probs drawn in [-old_scale, 0)
    noise: float = 0.5  # logp = old + noise * N(0, 1)
    adv_scale: float = 1.0  # advantage = adv_scale * N(0, 1), one per response
    # The batch exercises the method: its clip states show what it did (None: no check).
    exercised: Callable[[torch.Tensor], torch.Tensor] | None = None


CASES = [
    pytest.param(Case("cispo", {"clip_ratio_low": 10.0, "clip_ratio_high": 0.2},
                      exercised=lambda s: s == 6),  # some weights were cut (trunc_high)
                 id="cispo"),
    pytest.param(Case("kl_cov", {"kl_cov_ratio": 0.1, "ppo_kl_coef": 1.0},
                      {"ratio": 0.1, "coef": 1.0}),
                 id="kl_cov"),
    # verl draws with torch's global RNG; with ratio 1 every candidate is detached in both,
    # so the two are the same function.
    pytest.param(Case("clip_cov", {"clip_ratio_low": 0.2, "clip_ratio_high": 0.2,
                                   "clip_cov_ratio": 1.0, "clip_cov_lb": 0.2, "clip_cov_ub": 3.0},
                      {"c_low": 0.8, "c_high": 1.2, "ratio": 1.0, "lb": 0.2, "ub": 3.0},
                      old_scale=3.0, adv_scale=2.0,
                      exercised=lambda s: (s == 4).any() & ((s == 1) | (s == 2)).any()),
                 id="clip_cov-every-candidate-detached"),
    pytest.param(Case("gspo", {"clip_ratio_low": 3e-4, "clip_ratio_high": 4e-4},
                      {"aggregation": "seq-mean-token-mean"}, agg="seq-mean-token-mean",
                      old_scale=1.0, noise=6e-4,
                      exercised=lambda s: (s != 0).any() & (s == 0).any()),
                 id="gspo"),
    # verl forces seq-mean-token-mean for sapo, whatever loss_agg_mode says
    pytest.param(Case("sapo", {"tau_pos": 1.0, "tau_neg": 1.05}, {"aggregation": "seq-mean-token-mean"},
                      agg="token-mean", noise=1.5,
                      exercised=lambda s: s == CLIP_STATES.index("gated")),
                 id="sapo"),
    # the authors' script: thresholds on both sides, clip_ratio_c=10000
    pytest.param(Case("dppo_tv", {"clip_ratio": 0.15, "clip_ratio_low": 0.15, "clip_ratio_high": 0.15,
                                  "clip_ratio_c": 10000.0},
                      old_scale=1.0, noise=0.3, exercised=lambda s: s == CLIP_STATES.index("masked")),
                 id="dppo_tv"),
    pytest.param(Case("dppo_kl", {"clip_ratio": 0.05, "clip_ratio_low": 0.05, "clip_ratio_high": 0.05,
                                  "clip_ratio_c": 10000.0},
                      old_scale=1.0, noise=0.3, exercised=lambda s: s == CLIP_STATES.index("masked")),
                 id="dppo_kl"),
]


@pytest.mark.parametrize("case", CASES)
def test_equals_verls_loss(case: Case):
    g = torch.Generator().manual_seed(7)
    b, t = 6, 8
    old = -case.old_scale * torch.rand(b, t, generator=g)
    logp = (old + case.noise * torch.randn(b, t, generator=g)).requires_grad_()
    mask = (torch.rand(b, t, generator=g) < 0.8).float()
    mask[:, 0] = 1.0
    adv = case.adv_scale * torch.randn(b, 1, generator=g).expand(b, t).contiguous()
    ref = verl_policy_loss(case.method, old, logp, adv, mask, case.agg, **case.verl)
    (ref_grad,) = torch.autograd.grad(ref, logp)
    out = policy_loss(case.method, logp, old, adv, mask.bool(), **case.ours)
    (grad,) = torch.autograd.grad(out.loss, logp)
    if case.exercised is not None:
        assert bool(case.exercised(out.clip_state).any())
    torch.testing.assert_close(out.loss, ref, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-7)
