"""The warm start's settings: the tiny model's architecture and the SFT recipe, their defaults,
and the one interface the config's checks use (`settings_problem`, `tiny_layers`, `tiny_shape`,
provided to src/registry.py).

Plain Python: the config reads these without building anything.
"""

from __future__ import annotations

from typing import Any

from src.registry import provide

DEFAULT_MODEL_CFG: dict[str, Any] = {
    "arch": "llama",
    "hidden_size": 256,
    "num_layers": 4,
    "num_heads": 4,
    "intermediate_size": None,  # None: 8/3 * hidden_size, rounded up to a multiple of 16
    "max_position_embeddings": 128,
    "tie_word_embeddings": True,
    "vocab_size": 320,  # tokenizer budget; arithmetic text uses about 266
    "tokenizer_corpus": 20_000,  # training problems used to train the tokenizer
}

DEFAULT_SFT_CFG: dict[str, Any] = {
    "steps": 350,  # ~100 s on 2 idle cores; ~35% sampled accuracy on the default mix
    "batch_size": 32,
    "lr": 1e-3,  # 3e-3 never learned to copy the terms within the budget
    "min_lr_ratio": 0.1,  # cosine decay to lr * min_lr_ratio
    "warmup_steps": 35,
    "weight_decay": 0.01,
    "grad_clip": 1.0,
    "pack_len": 128,  # pack problems into rows of this many tokens; 0 = one padded row each
    "eval_problems": 256,  # held-out problems for the accuracy measurement
    "eval_samples": 4,  # sampled responses per held-out problem
    "eval_temperature": 1.0,
    "max_new_tokens": 64,
    # > 0: a warm start with more entropy (the SFT target mixes in a uniform distribution);
    # 0 leaves the cache key as before it existed (`cache_key`), so shipped builds still load
    "label_smoothing": 0.0,
}


def resolve_configs(
    model_cfg: dict[str, Any] | None, sft_cfg: dict[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Fill in defaults; unknown keys are config errors named by their key."""
    out = []
    for prefix, given, default in (
        ("model", model_cfg or {}, DEFAULT_MODEL_CFG),
        ("sft", sft_cfg or {}, DEFAULT_SFT_CFG),
    ):
        unknown = sorted(set(given) - set(default))
        if unknown:
            raise ValueError(
                f"unknown key(s) {', '.join(f'{prefix}.{k}' for k in unknown)}; "
                f"valid keys: {sorted(default)}"
            )
        out.append({**default, **dict(given)})
    m, s = out
    for key in ("steps", "batch_size", "eval_problems", "eval_samples", "max_new_tokens"):
        if int(s[key]) < 1:
            raise ValueError(f"sft.{key} must be >= 1, got {s[key]}")
    if not float(s["lr"]) > 0:
        raise ValueError(f"sft.lr must be > 0, got {s['lr']}")
    if not 0.0 <= float(s["label_smoothing"]) < 1.0:
        raise ValueError(f"sft.label_smoothing must be in [0, 1), got {s['label_smoothing']}")
    return m, s


def settings_problem(architecture: dict[str, Any] | None, sft: dict[str, Any] | None) -> str | None:
    """What is wrong with `model.architecture` / `model.sft` (an unknown key, a bad SFT value)
    as one `config error:` message starting with its key; None when nothing is."""
    try:
        resolve_configs(architecture, sft)
    except ValueError as e:
        message = str(e).replace("model.", "model.architecture.").replace("sft.", "model.sft.")
        key = "model.sft" if "model.sft." in message else "model.architecture"
        return f"{key}: {message}"
    return None


def tiny_layers(architecture: dict[str, Any] | None) -> int:
    """The layer count of the tiny model `architecture` asks for, defaults filled in (the
    config checks model.freeze_layers against it)."""
    return int(resolve_configs(architecture, None)[0]["num_layers"])


def tiny_shape(architecture: dict[str, Any] | None) -> tuple[int, int, int]:
    """(hidden size, heads, positions) of the tiny model `architecture` asks for, defaults
    filled in (the config checks that the heads divide the width and that a prompt and the
    longest response fit in the positions)."""
    m, _ = resolve_configs(architecture, None)
    return int(m["hidden_size"]), int(m["num_heads"]), int(m["max_position_embeddings"])


# What the config's checks read (src/registry.py), without building anything.
provide("tiny_model.settings_problem", settings_problem)
provide("tiny_model.layers", tiny_layers)
provide("tiny_model.shape", tiny_shape)
