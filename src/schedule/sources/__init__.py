"""The source registry: one module per off-policy source, found and registered on import.

Adding a source is one module here (its `Params` and `Source` subclass, decorated with
`@register`; src/schedule/sources/_base.py says what a source owns), one
`conf/experiment/<name>.yaml` and one test; its parameters are spelled out as flat keys in
src/config.py `OffPolicyConfig` too (tests/test_source_registry.py holds them equal to
`offpolicy_fields()`), and nothing else names it. Modules whose names
start with `_` hold shared parts, not sources.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

from src.config_fields import setting
from src.registry import provide
from src.schedule.sources._base import (
    SOURCES,
    Generation,
    Source,
    SourceParams,
    StepData,
    checked_params,
    param_names,
    register,
)

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")


def build_source(offpolicy) -> Source:
    """The source an `offpolicy` config section asks for (validated before)."""
    cls = SOURCES[offpolicy.source]
    return cls.from_params(cls.Params(**{k: getattr(offpolicy, k) for k in param_names(cls)}))


def offpolicy_fields() -> list[tuple[str, type, dataclasses.Field]]:
    """Every source's parameters as flat fields of the `offpolicy` section: null unless the
    source is chosen, the help naming it (src/config.py `OffPolicyConfig` declares them)."""
    import typing

    out = []
    for name, cls in SOURCES.items():
        hints = typing.get_type_hints(cls.Params)
        for f in dataclasses.fields(cls.Params):
            null = "" if f.default is None else f" (null: {_yaml(f.default)})"
            out.append((f.name, hints[f.name] | None,
                        setting(None, f"{name} only: {f.metadata['help']}{null}")))
    return out


def _yaml(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# What the config's checks read (src/registry.py): the sources and their parameters' check.
provide("sources", SOURCES)
provide("sources.check", checked_params)


__all__ = ["SOURCES", "Generation", "Source", "SourceParams", "StepData", "build_source",
           "checked_params", "offpolicy_fields", "register"]
