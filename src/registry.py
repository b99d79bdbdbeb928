"""The one door between the registries and the config: each subsystem provides here what
the config's checks read about it, and the config reads it here, so src/config.py imports no
subsystem (tests/test_config_imports.py holds that).

What is provided, and by whom (each on its own import):

    methods                      {objective: Method class}   src/algorithms/methods/__init__.py
    method.build                 build_method(objective, params, aggregation=, norm_length=)
    method.aggregations          the loss aggregations                    (same module)
    sources                      {name: Source class}        src/schedule/sources/__init__.py
    sources.check                checked_params(offpolicy, cfg)           (same module)
    tasks                        {name: Task class}          src/tasks/__init__.py
    tasks.rewards                the reward sources          src/tasks/rewards.py
    corrections.build            build_correction(section)   src/corrections/__init__.py
    tiny_model.settings_problem  the tiny model's settings,  src/warm_start/settings.py
    tiny_model.layers            its layer count,
    tiny_model.shape             its (hidden, heads, positions)

Whoever composes a run loads them all first: src/compose.py does, on import.
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")
_PROVIDED: dict[str, Any] = {}


def provide(name: str, value: T) -> T:
    """Make `value` what the config reads as `name` (the last provider wins)."""
    _PROVIDED[name] = value
    return value


def read(name: str) -> Any:
    """What was provided as `name`; a LookupError naming the fix when nothing was."""
    try:
        return _PROVIDED[name]
    except KeyError:
        raise LookupError(f"nothing provides {name!r} yet: import src.compose (it loads every "
                          "registry) before composing or validating a config") from None
