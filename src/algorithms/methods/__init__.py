"""The method registry: one module per method, found and registered on import.

Adding a method is one module here (its `Params` and `Method` subclass, decorated with
`@register`), one `conf/method/<name>.yaml` (only what differs from the module's defaults,
which it pulls in as Hydra's `method_defaults/<name>`) and one test; nothing else names it. Modules
whose names start with `_` hold shared parts, not methods.
"""

from __future__ import annotations

import importlib
import pkgutil

from src.algorithms.methods._base import (
    METHODS,
    Decision,
    DecisionInputs,
    Method,
    MethodParams,
    PolicyLossOutput,
    TokenObjective,
    register,
)
from src.algorithms.surrogate import AGGREGATIONS
from src.registry import provide

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")


def method_class(objective: str) -> type[Method]:
    if objective not in METHODS:
        raise ValueError(f"unknown method {objective!r}; registered: {sorted(METHODS)}")
    return METHODS[objective]


def build_method(objective: str, params: MethodParams | dict | None = None, *,
                 aggregation: str = "token-mean", norm_length: int | None = None) -> Method:
    """The registered method `objective` with `params` (its dataclass, or a dict of fields)."""
    cls = method_class(objective)
    if isinstance(params, dict):
        params = make_params(objective, params)
    return cls(params, aggregation=aggregation, norm_length=norm_length)


def make_params(objective: str, values: dict) -> MethodParams:
    """The method's params from a dict; unknown keys are a ValueError naming them."""
    import dataclasses

    cls = method_class(objective).Params
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"unknown parameter(s) {unknown} for method {objective!r}; "
                         f"its parameters: {sorted(known)}")
    return cls(**values)


# What the config's checks read (src/registry.py): the objectives, and how to build one.
provide("methods", METHODS)
provide("method.build", build_method)
provide("method.aggregations", AGGREGATIONS)


__all__ = ["METHODS", "Decision", "DecisionInputs", "Method", "MethodParams", "PolicyLossOutput",
           "TokenObjective", "build_method", "make_params", "method_class", "register"]
