"""What a run composes against: every registry loaded, and the config's defaults given to
Hydra. Importing it does both, once; whoever composes or validates a config imports it first
(src/run.py, src/preflight.py, src/build.py, the plugs, tests/conftest.py).

The config (src/config.py) imports no subsystem: it reads what its checks need through
src/registry.py, which the modules imported here fill. A new registry is one import below.
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

import src.algorithms  # noqa: F401 - the methods, their builder and aggregations
import src.corrections  # noqa: F401 - the mismatch corrections' builder
import src.schedule.sources  # noqa: F401 - the off-policy sources and their parameters' check
import src.tasks  # noqa: F401 - the tasks and the reward sources
import src.warm_start.settings  # noqa: F401 - the tiny model's settings and shape
from src import registry
from src.config import Config, method_defaults, to_container
from src.config_fields import help_lines
from src.run_dir import OVERRIDE_TAG_EXCLUDES

DEFAULTS_NODE = "project_defaults"
METHOD_DEFAULTS_GROUP = "method_defaults"


def register_defaults() -> None:
    """The dataclasses' defaults as Hydra's `project_defaults`, the first entry of
    conf/config.yaml's defaults list: every yaml then holds only what differs from them;
    and `${settings_help:}`, the settings' help in `--help`.

    Stored as plain data, without the schema: types and values are checked by `validate`,
    so a bad value is a `ConfigError` naming its key, never a Hydra traceback. `method`
    is left out of `project_defaults`: a ppo section under method=bapo would be an error.
    Each objective's defaults are their own node instead, `method_defaults/<objective>`,
    the first entry of conf/method/<objective>.yaml's defaults list.
    """
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    defaults: dict[str, Any] = to_container(Config())
    del defaults["method"]
    # The run-dir tag leaves out the keys that change no number (src/run_vocab.py).
    tag = {"override_dirname": {"exclude_keys": list(OVERRIDE_TAG_EXCLUDES)}}
    store.store(name=DEFAULTS_NODE, node={**defaults, "hydra": {"job": {"config": tag}}})
    for objective in registry.read("methods"):
        store.store(group=METHOD_DEFAULTS_GROUP, name=objective, node=method_defaults(objective))
    OmegaConf.register_new_resolver("settings_help", settings_help, replace=True)  # --help


def settings_help() -> str:
    """`key = default  help` per setting, for `python -m src.run --help`; under
    offpolicy.source, one line per registered source (the config names none)."""
    lines = help_lines(Config)
    at = lines.index(next(line for line in lines if line.startswith("offpolicy.source =")))
    sources = [f"    {name}: {cls.help}" for name, cls in registry.read("sources").items()]
    return "\n".join([*lines[:at + 1], *sources, *lines[at + 1:]])


register_defaults()
