"""bf16 autocast with fp32 master weights (`model.autocast: bfloat16`).

The weights, their gradients and the AdamW states stay in the model's dtype (fp32 for the
tiny family), so small updates are not rounded away; matmuls run in bf16 under
`torch.autocast`. Log-probs and entropies are always computed in fp32 from the (bf16)
logits (`src/policy.py`, and HF generate's scores, which it upcasts itself).

`autocast_forward` wraps the model's own `forward`, so every caller (HF generate in the
rollout and the evals, the trainer's scoring passes, the warm start's SFT loss) runs under
the same autocast without knowing about it; `autocast` is the same context for code that
calls the model directly.
"""

from __future__ import annotations

import contextlib
import functools
import types

import torch

AUTOCAST_DTYPES = {"bfloat16": torch.bfloat16}


def autocast_dtype(name: str | None) -> torch.dtype | None:
    """`None` (no autocast) or `"bfloat16"` -> the torch dtype; anything else is an error."""
    if name is None:
        return None
    try:
        return AUTOCAST_DTYPES[name]
    except KeyError:
        raise ValueError(f"model.autocast must be null or bfloat16, got {name!r}") from None


def autocast(device: torch.device | str, name: str | None):
    """`torch.autocast` on `device`'s type in dtype `name`; for `None` a context that does
    nothing at all. Not `torch.autocast(enabled=False)`: that one counts as a level of
    autocast nesting, so an enabled context inside it no longer drops its cache of bf16
    weight casts on exit, and weights updated since would be read stale."""
    dtype = autocast_dtype(name)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)


def autocast_forward(model: torch.nn.Module, name: str | None) -> torch.nn.Module:
    """Make `model.forward` run under autocast `name` on whatever device the model is on.

    Idempotent; `None` leaves the model unchanged. The wrapper is bound to the model (a
    deep copy rebinds it to the copy) and reports the class's `forward` signature, which
    HF generate inspects for the arguments it may pass (`logits_to_keep`, ...).
    """
    if autocast_dtype(name) is None or getattr(model, "autocast_name", None) == name:
        return model
    cls_forward = type(model).forward

    def forward_in_autocast(self, *args, **kwargs):
        with autocast(next(self.parameters()).device, self.autocast_name):
            return cls_forward(self, *args, **kwargs)

    functools.update_wrapper(forward_in_autocast, cls_forward)
    model.autocast_name = name
    model.forward = types.MethodType(forward_in_autocast, model)
    return model
