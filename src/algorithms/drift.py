"""How far an update's policy has drifted from the data's behaviour policy, per update.

Pure functions of per-token tensors [B, T] and a mask. `log_r = logp - logp_behaviour`
(samples come from the behaviour policy, so the estimators below are of KL(behaviour ||
current)):

- `behav_abs_log_ratio_mean`: mean |log r|;
- `behav_kl_k1`: mean of -log r (unbiased, noisy); `behav_kl_k3`: mean of (r - 1) - log r
  (unbiased, >= 0 per token; Schulman's k3);
- `behav_m2`: mean of (log r)^2, M2PO's second moment;
- `behav_ess`: the effective sample size of the token IS weights r as a share of the
  tokens, (sum r)^2 / (n sum r^2), in (0, 1];
- `behav_weight_min/mean/max`: the decoupled objective's behaviour weights (None without);
- `ratio_hist_pos` / `ratio_hist_neg`: token counts of the ratio the method clips, by the
  advantage's sign, in the bins of `RATIO_BIN_EDGES`: (<=0.2], (0.2, 0.5], ..., (2, inf);
- `policy_lag` / `policy_lag_max`: mean and max lag in optimizer updates of the tokens;
- `version_span_mean` / `version_span_max`: per response, newest minus oldest token
  version (0 unless partial rollouts continued it under newer weights).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from src.run_vocab import RATIO_BIN_EDGES

RATIO_BIN_LABELS = ("<=0.2", "0.2-0.5", "0.5-0.8", "0.8-1", "1-1.2", "1.2-1.5", "1.5-2", ">2")


def ratio_histogram(ratio: Tensor, advantages: Tensor, mask: Tensor) -> dict[str, list[int]]:
    """Counts per bin (right-closed) of the masked tokens' ratio, A>0 and A<0 apart."""
    mask = mask.bool()
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(mask)
    r = ratio.detach()[mask]
    a = advantages.detach().to(r.device)[mask]
    # edges in the ratio's own dtype: a float32 ratio of 0.2 is in "<=0.2", as logged
    edges = torch.tensor(RATIO_BIN_EDGES, dtype=r.dtype, device=r.device)
    bins = torch.bucketize(r, edges, right=False)  # edges[i-1] < r <= edges[i]
    n = len(RATIO_BIN_EDGES) + 1
    return {"ratio_hist_pos": torch.bincount(bins[a > 0], minlength=n).tolist(),
            "ratio_hist_neg": torch.bincount(bins[a < 0], minlength=n).tolist()}


def drift_metrics(logp: Tensor, logp_behavior: Tensor, mask: Tensor, lag: Tensor,
                  behaviour_weight: Tensor | None = None) -> dict[str, Any]:
    """The per-update drift readings above; `lag` [B] or [B, T] in optimizer updates."""
    mask = mask.bool()
    if lag.dim() == 1:
        lag = lag[:, None].expand_as(mask)
    log_r = (logp.detach() - logp_behavior.detach())[mask].double()
    lags = lag.to(mask.device)[mask]
    out: dict[str, Any] = {key: None for key in (
        "behav_abs_log_ratio_mean", "behav_kl_k1", "behav_kl_k3", "behav_m2", "behav_ess",
        "behav_weight_min", "behav_weight_mean", "behav_weight_max", "policy_lag",
        "policy_lag_max", "version_span_mean", "version_span_max")}
    if log_r.numel() == 0:
        return out
    r = log_r.exp()
    out.update(
        behav_abs_log_ratio_mean=float(log_r.abs().mean()),
        behav_kl_k1=float((-log_r).mean()),
        behav_kl_k3=float(((r - 1.0) - log_r).mean()),
        behav_m2=float((log_r ** 2).mean()),
        behav_ess=float(r.sum() ** 2 / (r.numel() * (r ** 2).sum())),
        policy_lag=float(lags.double().mean()),
        policy_lag_max=int(lags.max()),
    )
    rows = mask.any(dim=1)
    lag_rows = lag.to(mask.device)
    big = torch.iinfo(lag_rows.dtype).max if not lag_rows.is_floating_point() else float("inf")
    newest = torch.where(mask, lag_rows, torch.full_like(lag_rows, big)).min(dim=1).values[rows]
    oldest = torch.where(mask, lag_rows, torch.full_like(lag_rows, -big)).max(dim=1).values[rows]
    span = (oldest - newest).double()  # lag: the oldest token has the largest
    out.update(version_span_mean=float(span.mean()), version_span_max=int(span.max()))
    if behaviour_weight is not None:
        w = behaviour_weight.detach()[mask].double()
        out.update(behav_weight_min=float(w.min()), behav_weight_mean=float(w.mean()),
                   behav_weight_max=float(w.max()))
    return out
