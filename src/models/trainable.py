"""Which weights RL trains: all of them (the default), or fewer, as cost levers for a
pretrained model (`model.freeze_embeddings`, `model.freeze_layers`, `model.lora_r`).

Each lever changes what an update can move, and so how far the ratios move: it is another
testbed unless its regime (clip fraction, band mass) is measured to be the same
(docs/pretrained.md). With every setting at its default nothing is touched, so the
optimizer sees the same parameters in the same order as before these levers existed.

LoRA is injected in place (`peft.inject_adapter_in_model`): the model keeps its own class,
so the decode loop, the scoring passes and the checkpoints treat it as before; the
adapters' B matrices start at zero, so the adapted model starts equal to the base model.
"""

from __future__ import annotations

import torch


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The decoder blocks of an HF causal LM, lowest first (`model.model.layers` for Llama,
    Qwen2 and the tiny family)."""
    base = getattr(model, "model", None)
    layers = getattr(base, "layers", None)
    if layers is None:
        raise ValueError(f"model.freeze_layers: cannot find the decoder layers of "
                         f"{type(model).__name__} (expected model.model.layers)")
    return layers


def apply_trainable(model: torch.nn.Module, *, freeze_embeddings: bool = False,
                    freeze_layers: int = 0, lora_r: int = 0, lora_alpha: float = 16.0,
                    lora_targets: list[str] | tuple[str, ...] = ()) -> dict[str, int]:
    """Set `requires_grad` as the settings say (in place); returns the parameter counts
    {"trainable": n, "total": n} after it."""
    if lora_r:
        from peft import LoraConfig, inject_adapter_in_model

        config = LoraConfig(r=int(lora_r), lora_alpha=float(lora_alpha), lora_dropout=0.0,
                            target_modules=list(lora_targets), bias="none")
        inject_adapter_in_model(config, model)
        for name, p in model.named_parameters():
            p.requires_grad_("lora_" in name)
    if freeze_embeddings:
        # With tied word embeddings this is the LM head too: one tensor.
        model.get_input_embeddings().weight.requires_grad_(False)
    if freeze_layers:
        layers = decoder_layers(model)
        if freeze_layers > len(layers):
            raise ValueError(f"model.freeze_layers must be <= the model's {len(layers)} layers, "
                             f"got {freeze_layers}")
        for layer in layers[:freeze_layers]:
            for p in layer.parameters():
                p.requires_grad_(False)
    return {"trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "total": sum(p.numel() for p in model.parameters())}
