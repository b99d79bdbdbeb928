"""A method label's conf/method yaml, with its Hydra `defaults:` followed, read without
Hydra: what the TRL and verl plugs (src/integrations/_common.py) and analysis (a method's own
parameters, analysis/core/cells.py) both need, in a module that imports neither of them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from src.algorithms import METHODS

METHOD_CONF_DIR = Path(__file__).resolve().parents[1] / "conf" / "method"


def available_methods() -> list[str]:
    """Method labels with a yaml in conf/method/ (the project's one place for methods)."""
    return sorted(p.stem for p in METHOD_CONF_DIR.glob("*.yaml"))


# A defaults entry naming an objective's dataclass defaults, as conf/method/<objective>.yaml
# lists it first: `/method_defaults/<objective>@_here_` (src/compose.py register_defaults).
_DEFAULTS_ENTRY = re.compile(r"/method_defaults/(?P<objective>\w+)@_here_")


def load_method_yaml(name: str, _seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """conf/method/<name>.yaml with its Hydra `defaults:` merged in: other method files, and
    an objective's dataclass defaults (`/method_defaults/<objective>@_here_`), as Hydra
    composes them for `python -m src.run`."""
    path = METHOD_CONF_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"method {name!r} has no conf/method/{name}.yaml; "
                         f"known methods: {available_methods()}")
    if name in _seen:
        raise ValueError(f"conf/method defaults form a cycle: {' -> '.join((*_seen, name))}")
    raw = yaml.safe_load(path.read_text()) or {}
    defaults = raw.pop("defaults", None) or []
    merged = OmegaConf.create({})
    self_merged = False
    for entry in defaults:
        if entry == "_self_":
            merged, self_merged = OmegaConf.merge(merged, raw), True
        elif isinstance(entry, str) and (node := _DEFAULTS_ENTRY.fullmatch(entry)):
            from src.config import method_defaults  # late: the config imports the registry

            objective = node["objective"]
            if objective not in METHODS:
                raise ValueError(f"conf/method/{name}.yaml: {entry!r} names no objective; "
                                 f"known objectives: {sorted(METHODS)}")
            merged = OmegaConf.merge(merged, method_defaults(objective))
        elif isinstance(entry, str):
            merged = OmegaConf.merge(merged, load_method_yaml(entry, (*_seen, name)))
        else:
            raise ValueError(f"conf/method/{name}.yaml: unsupported defaults entry {entry!r}")
    if not self_merged:
        merged = OmegaConf.merge(merged, raw)
    return OmegaConf.to_container(merged, resolve=True)
