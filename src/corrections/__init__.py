"""Training-inference mismatch corrections: the registry, found on import, and the one
correction a run's `correction:` section asks for (verl's keys; docs/mismatch.md).

Adding a level is one module here (a function decorated with `@register_is` or
`@register_rs`, src/corrections/_base.py), a preset yaml in conf/correction/ if it deserves
a name, and one test; nothing else names it. Modules whose names start with `_` hold shared
parts.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass

from torch import Tensor

from src.corrections._base import (
    IS_LEVELS,
    RS_LEVELS,
    Bounds,
    Corrected,
    offpolicy_metrics,
    parse_bounds,
    parse_rs,
    rejection_keep,
    rs_options,
)
from src.corrections._base import is_weight as _is_weight
from src.registry import provide

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")

METRIC_PREFIX = "rollout_corr_"  # verl logs `rollout_corr/<name>`; run dirs use flat keys


@dataclass(frozen=True)
class Correction:
    """One run's correction, checked: the IS level and its bounds, the rejection options
    and theirs, and whether the ratio is taken against the sampler itself (bypass)."""

    rollout_is: str | None = None
    is_bounds: Bounds | None = None
    batch_normalize: bool = False
    rejection: dict[str, Bounds] | None = None
    bypass_mode: bool = False

    @property
    def active(self) -> bool:
        """Whether it changes the loss (an IS weight, a rejection mask or the bypass)."""
        return bool(self.rollout_is or self.rejection or self.bypass_mode)

    def apply(self, logp_old: Tensor, logp_sampler: Tensor, mask: Tensor) -> Corrected:
        """The weight and kept tokens of a batch [N, T] (mask: its response tokens), with the
        IS and RS metrics; the weight is None without IS."""
        mask = mask.bool()
        log_ratio = (logp_old - logp_sampler).detach()
        weight, metrics = None, {}
        if self.rollout_is is not None:
            weight, metrics = _is_weight(log_ratio, mask, self.rollout_is, self.is_bounds,
                                         self.batch_normalize)
        keep = mask
        if self.rejection:
            keep, rs_metrics = rejection_keep(log_ratio, mask, self.rejection)
            metrics.update(rs_metrics)
        return Corrected(weight, keep, metrics)


def build_correction(section) -> Correction:
    """The correction a `correction` config section (or anything with its attributes) asks
    for; raises ValueError naming the first bad key (`correction.<key> ...`)."""
    level = section.rollout_is
    if level is not None and level not in IS_LEVELS:
        raise ValueError(f"correction.rollout_is must be null or one of {sorted(IS_LEVELS)}, "
                         f"got {level!r}")
    is_bounds = None
    if level is not None:
        is_bounds = parse_bounds(section.rollout_is_threshold, "correction.rollout_is_threshold")
    rejection = None
    if section.rollout_rs is not None:
        rejection = parse_rs(section.rollout_rs, section.rollout_rs_threshold)
    elif section.rollout_rs_threshold is not None:
        raise ValueError("correction.rollout_rs_threshold is set but correction.rollout_rs is "
                         "null; name the rejection options or drop the threshold")
    if section.bypass_mode and level is not None:
        raise ValueError("correction.rollout_is must be null with correction.bypass_mode=true: "
                         "the ratio is then taken against the sampler, so an IS weight would "
                         "count the mismatch twice (verl's bypass ppo_clip ignores it)")
    if section.bypass_mode and rejection:
        raise ValueError("correction.rollout_rs must be null with correction.bypass_mode=true: "
                         "verl rejects on the current policy per micro-batch there, which this "
                         "trainer does not do; use bypass_mode=false (the decoupled mode)")
    return Correction(level, is_bounds, bool(section.rollout_is_batch_normalize), rejection,
                      bool(section.bypass_mode))


# What the config's checks read (src/registry.py): a section's correction, or its error.
provide("corrections.build", build_correction)

__all__ = ["IS_LEVELS", "METRIC_PREFIX", "RS_LEVELS", "Corrected", "Correction",
           "build_correction", "offpolicy_metrics", "rs_options"]
