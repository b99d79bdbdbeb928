"""The choices of config fields whose meaning a subsystem implements: plain tuples, read by
the config's checks and by the module that acts on each, so neither imports the other (as
src/model_dtypes.py does for `model.dtype`). Plain Python: no torch, no project import.
"""

from __future__ import annotations

# offpolicy.anchor and offpolicy.weight_rule: src/schedule/anchors.py
ANCHORS = ("coupled", "recompute", "decoupled")
WEIGHT_RULES = ("mask", "clamp")
# rollout.precision: the sampler's weights, src/rollout/sampler_precision.py
PRECISIONS = ("fp32", "bf16", "fp16", "int8")
