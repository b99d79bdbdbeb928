"""The dtypes a model's weights load in (`model.dtype`): plain Python, no torch.

Each full name with the short alias that the HF loader (src/models/hf.py `parse_dtype`)
also takes from library callers; config.yaml always holds the full name. A leaf beside
src/models/ rather than in it, so that the config (which checks `model.dtype` against it)
and the models both read it without the config loading the models package (transformers),
and without the models importing the config.
"""

from __future__ import annotations

MODEL_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
