"""What every training-inference mismatch correction is made of, and how they combine.

The rollout engine's log-probs `mu` (the sampler's) differ from the trainer's `pi_old` (its
behaviour pass) on every token when the engine runs another precision or other kernels
(src/rollout/sampler_precision.py). A correction acts on `log_ratio = log pi_old - log mu`
per response token, in verl's vocabulary (`algorithm.rollout_correction`,
verl/trainer/ppo/rollout_corr_helper.py at b178a3cd56f58b2d502255daba591e92833930a7):

- an importance-sampling (IS) weight `rollout_is` at a registered level (token: one ratio per
  token; sequence: the product of the response's ratios), detached, then either truncated at
  `rollout_is_threshold` (a number: TIS, `min(w, threshold)`) or masked outside `[lo, hi]`
  (a `"lo_hi"` string: weight 0 outside, as TRL's `*_mask` modes and IcePop do; the token
  still counts in the loss's denominator), optionally normalised to mean 1 over the batch;
- a rejection-sampling (RS) mask `rollout_rs`: a comma list of registered statistics
  (`<level>_<k>`, e.g. token_k1, seq_mean_k1 = Geo-RS, seq_max_k3), each kept only within
  `rollout_rs_threshold`; a rejected token leaves the loss mask (and the denominator), as
  verl's modified `response_mask` does.

A level is one module of this package, registered with `@register_is` or `@register_rs`:
a function from (log_ratio [N, T], mask [N, T]) to the quantity compared with the threshold.
Everything else (thresholds, truncation, masking, normalisation, metrics) is here, once.
The correction is applied outside the method, as the decoupled anchor's weight is: the
weight through `Method.loss(token_weight=)`, the mask through the mini-batch's loss mask.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

# exp(+-20) bounds every exponentiated log-ratio, as verl's SAFETY_BOUND
SAFETY_BOUND = 20.0
DIVERGENCES = ("k1", "k2", "k3")


def masked_sum(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    picked = torch.where(mask, values, torch.zeros_like(values))
    return picked.sum() if dim is None else picked.sum(dim=dim)


def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """verl's masked mean: sum / (count + 1e-8), so an empty row gives 0, not NaN."""
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return masked_sum(values, mask, dim) / (count + 1e-8)


# -- the registries ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ISLevel:
    """`log_weight(log_ratio, mask)`: the log of each token's IS weight, [N, T] or [N, 1]."""

    name: str
    log_weight: Callable[[Tensor, Tensor], Tensor]
    help: str


@dataclass(frozen=True)
class RSLevel:
    """`statistic(divergence, mask)`: the per-token divergence [N, T] aggregated to what is
    compared with the threshold: per token [N, T], or per response [N] (`per_sequence`)."""

    name: str
    statistic: Callable[[Tensor, Tensor], Tensor]
    per_sequence: bool
    divergences: tuple[str, ...]
    help: str


IS_LEVELS: dict[str, ISLevel] = {}
RS_LEVELS: dict[str, RSLevel] = {}


def register_is(name: str, help: str):  # noqa: A002 - the registry entry's help text
    def wrap(fn: Callable[[Tensor, Tensor], Tensor]):
        IS_LEVELS[name] = ISLevel(name, fn, help)
        return fn
    return wrap


def register_rs(name: str, help: str, divergences: tuple[str, ...] = DIVERGENCES,  # noqa: A002
                per_sequence: bool = True):
    def wrap(fn: Callable[[Tensor, Tensor], Tensor]):
        RS_LEVELS[name] = RSLevel(name, fn, per_sequence, divergences, help)
        return fn
    return wrap


def rs_options() -> list[str]:
    """Every registered rejection statistic, `<level>_<k>`."""
    return [f"{level.name}_{k}" for level in RS_LEVELS.values() for k in level.divergences]


# -- thresholds --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bounds:
    """A threshold: keep `lower <= x <= upper` (lower None: no lower bound)."""

    upper: float
    lower: float | None = None

    @property
    def two_sided(self) -> bool:
        return self.lower is not None


def parse_bounds(spec, key: str, *, lower_allowed: bool = True) -> Bounds:
    """A number (an upper bound > 0) or a `"lo_hi"` string (0 <= lo < hi); errors name `key`."""
    if isinstance(spec, bool) or spec is None:
        raise ValueError(f"{key} must be a number > 0 or a 'lo_hi' string, got {spec!r}")
    if isinstance(spec, int | float):
        if not (math.isfinite(spec) and spec > 0):
            raise ValueError(f"{key} must be > 0, got {spec}")
        return Bounds(float(spec))
    text = str(spec).strip()
    if "_" not in text:
        try:
            return parse_bounds(float(text), key)
        except ValueError:
            raise ValueError(f"{key} must be a number > 0 or a 'lo_hi' string, got {spec!r}") from None
    if not lower_allowed:
        raise ValueError(f"{key} takes one upper bound here, not a 'lo_hi' pair, got {spec!r}")
    lo_text, hi_text = text.split("_", 1)
    try:
        lo, hi = float(lo_text), float(hi_text)
    except ValueError:
        raise ValueError(f"{key} must be a number > 0 or a 'lo_hi' string, got {spec!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 <= lo < hi):
        raise ValueError(f"{key} as 'lo_hi' needs 0 <= lo < hi, got lo={lo}, hi={hi}")
    return Bounds(hi, lo)


def parse_rs(options: str, spec, key: str = "correction") -> dict[str, Bounds]:
    """`rollout_rs` (a comma list, duplicates dropped) -> {option: bounds}, one threshold
    shared by all or one per option, as verl's `_parse_rollout_rs_thresholds`: k1 options
    bound the ratio (`lo_hi`, or one number u for [1/u, u]); k2/k3 take one upper bound."""
    names = list(dict.fromkeys(o.strip() for o in str(options).split(",") if o.strip()))
    if not names:
        raise ValueError(f"{key}.rollout_rs must name at least one of {rs_options()}, got {options!r}")
    for name in names:
        if name not in rs_options():
            raise ValueError(f"{key}.rollout_rs: unknown option {name!r}; the options: {rs_options()}")
    if spec is None:
        raise ValueError(f"{key}.rollout_rs_threshold must be set when rollout_rs is ({options!r})")
    specs = [s.strip() for s in str(spec).split(",")] if isinstance(spec, str) else [spec]
    if len(specs) == 1:
        specs = specs * len(names)
    if len(specs) != len(names):
        raise ValueError(f"{key}.rollout_rs_threshold has {len(specs)} values for {len(names)} "
                         f"rollout_rs options; give one, or one per option")
    out = {}
    for name, one in zip(names, specs, strict=True):
        k1 = name.endswith("k1")
        bounds = parse_bounds(one, f"{key}.rollout_rs_threshold ({name})", lower_allowed=k1)
        if k1 and not bounds.two_sided:
            if bounds.upper <= 1:
                raise ValueError(f"{key}.rollout_rs_threshold ({name}) as one number u keeps "
                                 f"ratios in [1/u, u], so it must be > 1, got {one!r}")
            bounds = Bounds(bounds.upper, 1.0 / bounds.upper)
        if k1 and bounds.lower == 0:
            raise ValueError(f"{key}.rollout_rs_threshold ({name}) needs lo > 0 (k1 compares "
                             f"log-ratios), got {one!r}")
        out[name] = bounds
    return out


# -- one correction ------------------------------------------------------------------------------


@dataclass
class Corrected:
    """A correction's result over a batch: the detached IS weight [N, T] (None: no IS), the
    kept tokens [N, T] (rejected ones False; padding False), and verl's metrics."""

    weight: Tensor | None
    keep: Tensor
    metrics: dict[str, float] = field(default_factory=dict)


def divergence(log_ratio: Tensor, k: str) -> Tensor:
    """verl's per-token estimators of log_ratio = log(pi_old / mu): k1 = -log r,
    k2 = (log r)^2 / 2, k3 = r - 1 - log r."""
    safe = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    if k == "k1":
        return -safe
    if k == "k2":
        return 0.5 * safe**2
    return torch.exp(safe) - 1.0 - safe


def is_weight(log_ratio: Tensor, mask: Tensor, level: str, bounds: Bounds,
              batch_normalize: bool) -> tuple[Tensor, dict[str, float]]:
    """The IS weight at `level`, zero on padding, metrics taken before truncation (verl's
    `compute_rollout_correction_weights` and `compute_is_metrics`), then truncated at the
    upper bound or masked outside [lower, upper], then optionally normalised to mean 1."""
    log_w = IS_LEVELS[level].log_weight(log_ratio, mask)
    raw = torch.exp(log_w.clamp(-SAFETY_BOUND, SAFETY_BOUND)).expand_as(log_ratio) * mask
    metrics = is_metrics(raw, log_w, mask, per_sequence=log_w.shape[-1] == 1, bounds=bounds)
    if bounds.two_sided:
        outside = (raw < bounds.lower) | (raw > bounds.upper)
        weight = raw.masked_fill(outside, 0.0)
        metrics["rollout_is_masked_fraction"] = float(masked_mean(outside.to(raw.dtype), mask))
    else:
        weight = raw.clamp(max=bounds.upper)
    weight = weight.detach()
    if batch_normalize:
        if log_w.shape[-1] == 1:  # one weight per response: the mean over responses
            valid = mask.any(dim=-1)
            per_seq = masked_mean(weight, mask, dim=-1)
            mean = (per_seq * valid).sum() / valid.sum().clamp_min(1e-8)
        else:
            mean = masked_mean(weight, mask)
        if mean > 1e-8:
            weight = weight / mean
        metrics["rollout_is_batch_norm_factor"] = float(mean) if mean > 1e-8 else 1.0
    return weight, metrics


def is_metrics(raw: Tensor, log_w: Tensor, mask: Tensor, *, per_sequence: bool,
               bounds: Bounds) -> dict[str, float]:
    """verl's `compute_is_metrics` on the untruncated weights: mean, max, min, std and
    effective sample size (both on weights clamped to [1/u, u]), the shares above u and
    below 1/u, where u is the upper bound."""
    upper = bounds.upper
    lower = 1.0 / upper
    out: dict[str, float] = {"rollout_is_mean": float(masked_mean(raw, mask))}
    if per_sequence:
        out["rollout_is_max"] = float(torch.exp(log_w.max().clamp(max=SAFETY_BOUND)))
        out["rollout_is_min"] = float(torch.exp(log_w.min()))
        out["rollout_is_ratio_fraction_high"] = float((log_w > math.log(upper)).float().mean())
        out["rollout_is_ratio_fraction_low"] = float((log_w < math.log(lower)).float().mean())
    else:
        out["rollout_is_max"] = float(raw.masked_fill(~mask, -math.inf).max())
        out["rollout_is_min"] = float(raw.masked_fill(~mask, math.inf).min())
        out["rollout_is_ratio_fraction_high"] = float(masked_mean((raw > upper).to(raw.dtype), mask))
        out["rollout_is_ratio_fraction_low"] = float(masked_mean((raw < lower).to(raw.dtype), mask))
    clamped = raw.clamp(min=lower, max=upper)
    mean = masked_mean(clamped, mask)
    if int(mask.sum()) > 1:
        var = masked_mean(clamped.square(), mask) - mean.square()
        out["rollout_is_std"] = float(var.clamp(min=0.0).sqrt())
    else:
        out["rollout_is_std"] = 0.0
    normalized = clamped / (mean + 1e-8)
    out["rollout_is_eff_sample_size"] = 1.0 / float(masked_mean(normalized.square(), mask))
    return out


def rejection_keep(log_ratio: Tensor, mask: Tensor, options: dict[str, Bounds]
                   ) -> tuple[Tensor, dict[str, float]]:
    """The tokens every option keeps (verl's `compute_rollout_rejection_mask`): a k1 option
    keeps log(lo) <= statistic <= log(hi) with k1 = -log r (so it bounds mu / pi_old, as
    verl's does), k2/k3 keep statistic <= upper; a per-response statistic keeps or rejects
    the whole response. Returns (kept tokens [N, T] bool, the masked shares)."""
    keep = mask.clone()
    out: dict[str, float] = {}
    n_seq = int(mask.any(dim=-1).sum())
    for name, bounds in options.items():
        level_name, k = name.rsplit("_", 1)
        level = RS_LEVELS[level_name]
        stat = level.statistic(divergence(log_ratio, k), mask)
        if k == "k1":
            ok = (stat >= math.log(bounds.lower)) & (stat <= math.log(bounds.upper))
        else:
            ok = stat <= bounds.upper
        ok = ok[:, None].expand_as(mask) if level.per_sequence else ok
        keep &= ok
        rejected = mask & ~ok
        out[f"rollout_rs_{name}_masked_fraction"] = float(masked_mean(rejected.float(), mask))
        out[f"rollout_rs_{name}_seq_masked_fraction"] = (
            float(rejected.any(dim=-1).sum()) / n_seq if n_seq else 0.0)
    out["rollout_rs_masked_fraction"] = float(masked_mean((mask & ~keep).float(), mask))
    out["rollout_rs_seq_masked_fraction"] = float((mask & ~keep).any(dim=-1).float().mean())
    return keep, out


def offpolicy_metrics(logp_old: Tensor, logp_sampler: Tensor, mask: Tensor) -> dict[str, float]:
    """verl's `compute_offpolicy_metrics`: the gap between the trainer's and the sampler's
    log-probs as k1 and k3 KL(mu || pi_old), each side's perplexity (the batch mean of the
    per-response perplexity), their log difference and ratio, and chi-square per token and
    per response (E[w^2] - 1)."""
    log_ratio = logp_old - logp_sampler
    out: dict[str, float] = {}
    mean_old = masked_mean(logp_old, mask, dim=-1)
    mean_sampler = masked_mean(logp_sampler, mask, dim=-1)
    out["training_ppl"] = float(torch.exp(-mean_old).mean())
    out["training_log_ppl"] = float((-mean_old).mean())
    out["kl"] = float(masked_mean(logp_sampler - logp_old, mask))
    out["k3_kl"] = float(masked_mean(torch.exp(log_ratio) - log_ratio - 1, mask))
    out["rollout_ppl"] = float(torch.exp(-mean_sampler).mean())
    out["rollout_log_ppl"] = float((-mean_sampler).mean())
    diff = mean_sampler - mean_old
    out["log_ppl_diff"] = float(diff.mean())
    out["log_ppl_abs_diff"] = float(diff.abs().mean())
    out["log_ppl_diff_max"] = float(diff.max())
    out["log_ppl_diff_min"] = float(diff.min())
    out["ppl_ratio"] = float(torch.exp(diff).mean())
    rho = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    out["chi2_token"] = float(masked_mean(rho.square(), mask)) - 1.0
    seq = masked_sum(log_ratio, mask, dim=-1).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    out["chi2_seq"] = float(torch.exp(2.0 * seq).mean()) - 1.0
    return out
