"""A config field is one `setting(...)`: its default, its help text and its check together;
a method's parameters are `setting(...)`s too (src/algorithms/methods/), with `source`, where
their default comes from.

A check takes the field's value and returns what is wrong with it (the message after the
key, e.g. `must be > 0, got 0`) or None. Checks that read several fields stay with the
config that holds them (src/config.py).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import sys
from collections.abc import Callable, Iterable
from dataclasses import field
from typing import Any

Check = Callable[[Any], str | None]


class ConfigError(ValueError):
    """A bad config value; the message names its key and how to fix it."""


EXIT_CONFIG = 2  # the exit code of every entry script on bad input


def config_exit(message: str) -> None:
    """Exit 2 with one `config error: ...` line: `python -m src.run` on a bad config, and the
    other entry scripts (experiments/, analysis/) on bad input. No torch, no Hydra."""
    print(f"config error: {message}", file=sys.stderr)
    sys.exit(EXIT_CONFIG)


def setting(default: Any, help: str, check: Check | None = None,  # noqa: A002 - field metadata key
            source: str | None = None) -> Any:
    """A dataclass field with its default, its help text (`--help`) and its check; `source`:
    where the default comes from (a paper's section, a peer's config), for a method's."""
    metadata = {"help": help, "check": check}
    if source is not None:
        metadata["source"] = source
    if isinstance(default, list | dict):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def _note(note: str) -> str:
    return f" ({note})" if note else ""


def above(bound: float, note: str = "") -> Check:
    return lambda v: None if v > bound else f"must be > {bound}{_note(note)}, got {v}"


def at_least(bound: float, note: str = "") -> Check:
    return lambda v: None if v >= bound else f"must be >= {bound}{_note(note)}, got {v}"


def finite_above(bound: float, note: str = "") -> Check:
    return lambda v: (None if math.isfinite(v) and v > bound
                      else f"must be a finite number > {bound}{_note(note)}, got {v}")


def finite_at_least(bound: float) -> Check:
    return lambda v: None if math.isfinite(v) and v >= bound else f"must be a finite number >= {bound}, got {v}"


def in_open_unit(note: str = "") -> Check:
    return lambda v: None if 0.0 < v < 1.0 else f"must be in (0, 1){_note(note)}, got {v}"


def in_half_open_unit() -> Check:
    return lambda v: None if 0 < v <= 1 else f"must be in (0, 1], got {v}"


def or_none(check: Check) -> Check:
    """`check`, with None allowed (a switch that is off)."""
    return lambda v: None if v is None else check(v)


def one_of(options: Iterable[Any], words: str | None = None) -> Check:
    """`words`: the options as the message says them (`tiny or hf`); else their list."""
    options = tuple(options)
    said = words or f"one of {list(options)}"
    return lambda v: None if v in options else f"must be {said}, got {v!r}"


def check_fields(section: Any, prefix: str) -> None:
    """Run every field's own check, depth first through nested sections."""
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        key = f"{prefix}.{f.name}" if prefix else f.name
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_fields(value, key)
            continue
        check = f.metadata.get("check")
        problem = check(value) if check is not None else None
        if problem:
            raise ConfigError(f"{key} {problem}")


def help_lines(cls: type, prefix: str = "") -> list[str]:
    """`key = default  help` for every field of `cls` and its nested sections."""
    lines = []
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}" if prefix else f.name
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        if dataclasses.is_dataclass(default):
            lines += help_lines(type(default), key)
        elif "help" in f.metadata:
            lines.append(f"{key} = {default!r}  {f.metadata['help']}")
    return lines
