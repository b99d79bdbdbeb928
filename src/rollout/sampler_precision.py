"""The rollout engine's precision (`rollout.precision`): the sampler's weights held as a
serving engine holds them, while the trainer scores in `model.dtype` / `model.autocast`.

Real systems sample with one engine and train with another: vLLM holds bf16 weights and runs
its own kernels, FlashRL serves int8, while the trainer scores in fp32. So the sampler's
`pi_sampler` differs from the trainer's `pi_old` on every token, and that gap is what the
mismatch corrections (src/corrections/) act on. Here the HF backend samples from a copy of
the trainer's model with its weights in the chosen precision, refreshed from the trainer's
current weights before every rollout:

- `fp32` (the default): no copy; the live model samples, as before (bit for bit).
- `bf16`, `fp16`: the copy's parameters and buffers in that dtype; the decode loop upcasts
  each step's logits to fp32 before the softmax, as vLLM's sampler does.
- `int8`: W8A8 dynamic quantization of the linear layers, the scheme of vLLM's int8
  checkpoints (compressed-tensors `W8A8`): weights per output channel and activations per
  token, both symmetric int8 (round half to even, [-127, 127]); the LM head stays in the
  model's dtype, as those checkpoints leave it. The int8 product is exact: the integer
  values are multiplied in fp32 where every partial sum fits its 24-bit mantissa
  (in_features <= 1040), else in fp64, so the result is the int32 GEMM's, on any device.

Why not torch's `quantize_dynamic`: it is deprecated in torch (and removed from its plans),
runs on the CPU only, and quantizes per tensor with asymmetric uint8 activations, which no
serving engine uses for W8A8.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from src.choices import PRECISIONS  # the choices, named in one place (src/choices.py)

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
_INT8_MAX = 127
# in_features up to which int8 x int8 partial sums stay exact in fp32: 1040 * 127**2 < 2**24
_EXACT_FP32_K = (2**24) // (_INT8_MAX * _INT8_MAX)


def quantize_symmetric(x: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """(integer values as x's dtype, scale) with x ~= values * scale, scale = max|x| / 127
    along `dim` (kept), values rounded half to even into [-127, 127]; an all-zero slice
    gets scale 1 (its values are 0)."""
    scale = x.abs().amax(dim=dim, keepdim=True) / _INT8_MAX
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.round(x / scale).clamp(-_INT8_MAX, _INT8_MAX), scale


class Int8Linear(nn.Module):
    """A linear layer as a W8A8 int8 engine runs it (see the module's docstring)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight_q", torch.empty(0), persistent=False)
        self.register_buffer("weight_scale", torch.empty(0), persistent=False)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(),
                                                                   requires_grad=False)
        self.load_from(linear.weight)

    @torch.no_grad()
    def load_from(self, weight: Tensor) -> None:
        """Quantize `weight` [out, in] per output channel."""
        self.weight_q, self.weight_scale = quantize_symmetric(weight.detach().float(), dim=1)

    def forward(self, x: Tensor) -> Tensor:
        compute = torch.float32 if self.in_features <= _EXACT_FP32_K else torch.float64
        x_q, x_scale = quantize_symmetric(x.float(), dim=-1)
        acc = x_q.to(compute) @ self.weight_q.to(compute).t()
        y = acc.float() * x_scale * self.weight_scale.t()
        if self.bias is not None:
            y = y + self.bias.float()
        return y.to(x.dtype)


def _linear_names(model: nn.Module) -> list[str]:
    """The linear layers an int8 engine quantizes: all but the LM head (output embeddings)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return [name for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and module is not head]


def _swap(model: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child, new)


def sampler_copy(model: nn.Module, precision: str) -> nn.Module | None:
    """The sampler's own copy of `model` in `precision`; None for fp32 (the live model samples)."""
    if precision not in PRECISIONS:
        raise ValueError(f"rollout.precision must be one of {list(PRECISIONS)}, got {precision!r}")
    if precision == "fp32":
        return None
    sampler = copy.deepcopy(model).eval()
    for p in sampler.parameters():
        p.requires_grad_(False)
    if precision in _DTYPES:  # the weights; buffers (RoPE's inverse frequencies) stay fp32
        for p in sampler.parameters():
            p.data = p.data.to(_DTYPES[precision])
        return sampler
    for name in _linear_names(sampler):
        _swap(sampler, name, Int8Linear(sampler.get_submodule(name)))
    return sampler


@torch.no_grad()
def refresh(sampler: nn.Module, model: nn.Module, precision: str) -> None:
    """Load the trainer's current weights into the sampler copy (cast, or re-quantized)."""
    source = dict(model.named_parameters())
    source.update(model.named_buffers())
    if precision == "int8":
        for name in _linear_names(model):
            sampler.get_submodule(name).load_from(source[f"{name}.weight"])
    targets = dict(sampler.named_parameters())
    targets.update(sampler.named_buffers())
    for name, value in targets.items():
        if name in source:  # int8 layers hold their quantized weights as their own buffers
            value.copy_(source[name])


def runs_on(device: torch.device | str, precision: str) -> str | None:
    """What is wrong with sampling in `precision` on `device` (None: it runs): a tiny
    linear layer and attention in that dtype, tried on the device."""
    if precision in ("fp32", "int8"):
        return None
    dtype = _DTYPES[precision]
    try:
        x = torch.ones(2, 8, dtype=dtype, device=device)
        nn.Linear(8, 8).to(device=device, dtype=dtype)(x)
        q = x[None, None]
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    except (RuntimeError, TypeError) as e:
        return f"{dtype} does not run on {device}: {str(e).splitlines()[0]}"
    return None
