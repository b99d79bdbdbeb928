"""Step records and token rows of the run-dir format, from plain tensors.

The project's trainer and the TRL plug both build their `kind: step` records and their
per-token Parquet columns here, so the two engines write the same schema
(`src.telemetry.TOKEN_SCHEMA`, docs/run_dir.md) with the same meanings.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from src.run_vocab import (
    CLIP_STATE_NAMES,
    STATE_FRACTIONS,
    STEP_MAX_KEYS,
    STEP_MEAN_KEYS,
    STEP_SUM_LIST_KEYS,
    MethodTraits,
)

_CLIP_NAMES = np.array(CLIP_STATE_NAMES)


def finite_mean(values: Iterable[Any]) -> float | None:
    """Mean of the finite numbers among `values` (None, NaN and inf left out); None if none."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return sum(vals) / len(vals) if vals else None


def rollout_record(step: int, rewards: Tensor, correct: Tensor, lengths: Tensor,
                   advantages: Tensor, *, degenerate_groups: int, num_groups: int,
                   entropy_mean: float | None, sampler_logp_gap: float | None) -> dict[str, Any]:
    """What a step's rollout was: rewards, verifier accuracy, response lengths by sign.

    All tensors are per response [B]; `correct` is the verifier's verdict (whatever the
    reward), `lengths` counts response tokens; `advantages` splits lengths by sign.
    """
    lengths = lengths.float()

    def mean_or_none(x: Tensor) -> float | None:
        return float(x.mean()) if x.numel() else None

    return {
        "step": step, "reward_mean": mean_or_none(rewards),
        "accuracy": mean_or_none(correct.float()),
        "degenerate_groups": degenerate_groups, "num_groups": num_groups,
        "response_length_mean": mean_or_none(lengths),
        "response_length_pos": mean_or_none(lengths[advantages > 0]),
        "response_length_neg": mean_or_none(lengths[advantages < 0]),
        "entropy_mean": entropy_mean, "sampler_logp_gap": sampler_logp_gap,
    }


def update_means(updates: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The step's means of `STEP_MEAN_KEYS` over its applied updates (booleans as shares),
    its sums of `STEP_SUM_LIST_KEYS`, its maxima of `STEP_MAX_KEYS`, and the skip count."""
    good = [u for u in updates if not u.get("skipped")]
    out: dict[str, Any] = {"skipped_updates": len(updates) - len(good)}
    for key in STEP_MEAN_KEYS:
        out[key] = finite_mean(u.get(key) for u in good)
    for key in STEP_SUM_LIST_KEYS:
        lists = [u[key] for u in good if u.get(key) is not None]
        out[key] = [sum(col) for col in zip(*lists, strict=True)] if lists else None
    for key in STEP_MAX_KEYS:
        values = [u[key] for u in good if u.get(key) is not None]
        out[key] = max(values) if values else None
    return out


def step_without_data(step: int) -> dict[str, Any]:
    """The record of a step whose source had nothing to train on (it only generated): no
    rollout trained, no update."""
    return {"step": step, "reward_mean": None, "accuracy": None, "num_groups": 0,
            "degenerate_groups": 0, "entropy_mean": None, **update_means([])}


def step_readings(entropies: list[Tensor], sampler_gaps: list[Tensor]) -> dict[str, float | None]:
    """The step record's entropy_mean and sampler_logp_gap from the generated rollout's
    response tokens, given per mini-batch (concatenated in that order, then averaged)."""
    ent = torch.cat(entropies)
    gap = torch.cat(sampler_gaps) if sampler_gaps else torch.zeros(0)
    return {"entropy_mean": float(ent.mean()) if ent.numel() else None,
            "sampler_logp_gap": float(gap.mean()) if gap.numel() else None}


def token_columns(*, step: int, update: int, select: Tensor, response_ids: Tensor,
                  group_ids: Tensor, token_ids: Tensor, logp_behavior: Tensor,
                  logp_sampler: Tensor | None, logp: Tensor, ratio: Tensor, advantages: Tensor,
                  entropy: Tensor, clip_state: Tensor, in_loss: Tensor, c_low: float | None,
                  c_high: float | None, rewards: Tensor, lengths: Tensor,
                  policy_version: Tensor | None = None, lag: Tensor | None = None,
                  is_weight: Tensor | None = None, rs_keep: Tensor | None = None
                  ) -> dict[str, np.ndarray]:
    """One row per selected response token (`select` [b, T] bool), the run dir's 22 columns.

    Per-token tensors are [b, T]; `response_ids`, `group_ids`, `rewards`, `lengths` are per
    row [b]; `advantages` may be either. `logp_sampler` None: NaN (the engine kept none).
    Bounds that a method does not have are NaN. `policy_version` and `lag` (optimizer
    updates) per row [b] or per token [b, T]; None: -1 (an engine that does not track them).
    `is_weight` and `rs_keep` [b, T]: the mismatch correction's IS weight (None: NaN, no IS)
    and whether its rejection kept the token (None: True, no rejection).
    """
    sel = select.detach().cpu().bool()
    rows, pos = sel.nonzero(as_tuple=True)
    n = int(sel.sum())

    def f32(t: Tensor | None) -> np.ndarray:
        if t is None:
            return np.full(n, np.nan, np.float32)
        return t.detach().cpu()[sel].float().numpy()

    def per_row(t: Tensor) -> Tensor:
        return t.detach().cpu()[rows]

    def bound(value: float | None) -> np.ndarray:
        return np.full(n, np.nan if value is None else value, np.float32)

    adv = per_row(advantages) if advantages.dim() == 1 else advantages.detach().cpu()[sel]
    return {
        "step": np.full(n, step, np.int32), "update": np.full(n, update, np.int16),
        "response_id": per_row(response_ids).numpy().astype(np.int32),
        "group_id": per_row(group_ids).numpy().astype(np.int32),
        "position": pos.numpy().astype(np.int16),
        "token_id": token_ids.detach().cpu()[sel].numpy().astype(np.int32),
        "logp_behavior": f32(logp_behavior), "logp_sampler": f32(logp_sampler),
        "logp": f32(logp), "ratio": f32(ratio), "advantage": adv.float().numpy(),
        "entropy": f32(entropy),
        "clip_state": _CLIP_NAMES[clip_state.detach().cpu()[sel].numpy()],
        "in_loss": in_loss.detach().cpu()[sel].numpy(),
        "c_low": bound(c_low), "c_high": bound(c_high),
        "reward": per_row(rewards).float().numpy(),
        "response_length": per_row(lengths).numpy().astype(np.int16),
        "policy_version": _ints(policy_version, sel, rows, n),
        "lag": _ints(lag, sel, rows, n),
        "is_weight": f32(is_weight),
        "rs_keep": np.ones(n, bool) if rs_keep is None else rs_keep.detach().cpu()[sel].numpy(),
    }


def _ints(values: Tensor | None, sel: Tensor, rows: Tensor, n: int) -> np.ndarray:
    if values is None:
        return np.full(n, -1, np.int32)
    values = values.detach().cpu()
    picked = values[rows] if values.dim() == 1 else values[sel]
    return picked.numpy().astype(np.int32)


def concat_columns(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


# -- combining per-micro-batch (and per-rank) update records ---------------------------------

# Counts and sums add up over micro-batches and ranks; shares are recomputed from them.
SUM_KEYS = ("tokens_in_loss", "tokens_pos", "tokens_neg", "tokens_zero", "contrib_grad_pos",
            "contrib_grad_neg", "contrib_value_pos", "contrib_value_neg", "tokens_total")
# Fractions are token-weighted means; the weight is the count they are a fraction of.
WEIGHTED_KEYS = {"clip_frac": "tokens_in_loss", **{k: "tokens_in_loss" for k in STATE_FRACTIONS},
                 "clip_frac_pos": "tokens_pos", "clip_frac_neg": "tokens_neg",
                 "ratio_mean": "tokens_total", "abs_log_ratio_mean": "tokens_total",
                 "kl_k3": "tokens_total", "entropy_mean": "tokens_total"}
_SHARES = {"token_share_pos": ("tokens_pos", "tokens_neg"),
           "token_share_neg": ("tokens_neg", "tokens_pos"),
           "contrib_grad_pos_share": ("contrib_grad_pos", "contrib_grad_neg"),
           "contrib_value_pos_share": ("contrib_value_pos", "contrib_value_neg")}
_RECORD_KEYS = ("skipped", "skip_reason", "tokens_total")


def _share(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or a + b <= 0:
        return None
    return a / (a + b)


def combine_records(records: list[dict[str, Any]], traits: MethodTraits | None = None
                    ) -> dict[str, Any]:
    """One update record from the per-micro-batch (and per-rank) records of an update.

    Counts and contribution sums add up; clip fractions are token-weighted; shares are
    recomputed from the sums; every other number (bounds, rho, a decision's scalars, the
    loss) is averaged: equal across micro-batches when the decision was taken on the whole
    update, which is the case the docs recommend. The method's `reached` flag (its
    `traits`) holds only if it held everywhere; its `undefined` flag and `zero_advantage`
    if anywhere.
    """
    traits = traits or MethodTraits()
    flags_all = tuple(k for k in (traits.reached,) if k)
    flags_any = (*(k for k in (traits.undefined,) if k), "zero_advantage")
    records = [r for r in records if r]
    if not records:
        return {}
    good = [r for r in records if not r.get("skipped")]
    use = good or records
    out: dict[str, Any] = {}
    for key in SUM_KEYS:
        vals = [r[key] for r in use if r.get(key) is not None]
        out[key] = sum(vals) if vals else None
    for key, weight_key in WEIGHTED_KEYS.items():
        pairs = [(r[key], r.get(weight_key) or 0) for r in use if r.get(key) is not None]
        total = sum(w for _, w in pairs)
        out[key] = (sum(v * w for v, w in pairs) / total if total > 0
                    else finite_mean(v for v, _ in pairs))
    for key, (a, b) in _SHARES.items():
        out[key] = _share(out[a], out[b])
    for key in flags_all + flags_any:
        flags = [r.get(key) for r in use if r.get(key) is not None]
        out[key] = (all(flags) if key in flags_all else any(flags)) if flags else None
    done = set(out) | set(_RECORD_KEYS)
    for key in dict.fromkeys(k for r in use for k in r):
        if key not in done:
            values = [r.get(key) for r in use]
            numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
            out[key] = finite_mean(numbers) if numbers else next((v for v in values if v is not None), None)
    out["skipped"] = not good
    reasons = [r.get("skip_reason") for r in records if r.get("skip_reason")]
    out["skip_reason"] = reasons[0] if reasons and not good else None
    out["micro_batches"] = len(records)
    out["micro_batches_skipped"] = len(records) - len(good)
    return out
