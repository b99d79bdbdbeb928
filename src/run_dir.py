"""Which run dir a config writes to, and whether an existing run dir holds the same run.

Two layers keep runs from colliding:

- the dir name: `runs/<experiment>/<method>/[<tag>/]seed<N>`, where the tag lists the
  command-line overrides that can change the numbers (Hydra's `hydra.job.override_dirname`,
  without `OVERRIDE_TAG_EXCLUDES`), or is a short hash of them when the
  list is long or holds characters a dir name should not (the full list is in meta.json);
- the config itself: before a run dir is skipped or resumed, the config it was made with
  (its config.yaml) is compared with this run's, ignoring the keys that change no number
  (src/run_vocab.py NON_NUMERIC_KEYS); any other difference refuses the run (exit 2) and
  names the first differing keys.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from src.run_vocab import NON_NUMERIC_KEYS, applies, flatten, is_non_numeric, upgrade_config

LEADING_KEYS = ("method.name", "method.objective", "experiment.name", "task.name", "model.name")
# The parts of the path itself: never repeated in the tag.
PATH_KEYS = ("experiment", "method", "seed")
# What the tag leaves out (Hydra's exclude_keys, set by src/compose.py register_defaults):
# the path's keys, the keys that change no number, and `logger`, the group choice (local
# and wandb differ only in keys that change no number).
OVERRIDE_TAG_EXCLUDES = (*PATH_KEYS, "logger", *NON_NUMERIC_KEYS)
MAX_TAG_CHARS = 80
_SAFE_TAG = re.compile(r"[A-Za-z0-9._,=+-]+")
_ABSENT = "<absent>"


def override_value(value: Any) -> str:
    """A scalar as a Hydra override writes it: YAML's `True` is Hydra's `true`."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def run_tag(override_dirname: str) -> str:
    """'' for no overrides, else '<tag>/': the overrides as written, or 'overrides-<hash>'."""
    if not override_dirname:
        return ""
    if len(override_dirname) <= MAX_TAG_CHARS and _SAFE_TAG.fullmatch(override_dirname):
        return f"{override_dirname}/"
    digest = hashlib.sha256(override_dirname.encode()).hexdigest()[:12]
    return f"overrides-{digest}/"


def register_resolver() -> None:
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("run_tag", run_tag, replace=True)
    OmegaConf.register_new_resolver("run_groups", run_groups, replace=True)  # --help
    # --help's ${settings_help:} is the config's own: src/compose.py registers it with its
    # defaults, so this module needs nothing of the config.


# conf/ dirs that are not groups of `python -m src.run`: launch configs of TRL, accelerate
# and verl (docs/integrations.md), which src.run would reject.
NOT_RUN_GROUPS = ("integrations",)


def run_groups() -> str:
    """The `group: option, ...` lines of `--help`, without NOT_RUN_GROUPS."""
    conf = Path(__file__).resolve().parent.parent / "conf"
    lines = []
    for group in sorted(p for p in conf.iterdir() if p.is_dir() and p.name not in NOT_RUN_GROUPS):
        options = sorted(f.stem for f in group.glob("*.yaml"))
        if options:
            lines.append(f"{group.name}: {', '.join(options)}")
    return "\n".join(lines)


def config_differences(stored: dict, current: dict) -> list[tuple[str, Any, Any]]:
    """(key, stored value, current value) for every key that can change the numbers (a key
    that applies under another key's value only, in neither config, cannot)."""
    a, b = flatten(stored), flatten(current)
    keys = sorted(k for k in set(a) | set(b)
                  if not is_non_numeric(k) and (applies(k, a) or applies(k, b)))
    return [(k, a.get(k, _ABSENT), b.get(k, _ABSENT)) for k in keys
            if a.get(k, _ABSENT) != b.get(k, _ABSENT)]


def stored_config(run_dir: Path) -> dict | None:
    """The config.yaml a run dir was made with, in today's layout; None when it has none
    (or it is unreadable)."""
    import yaml

    try:
        loaded = yaml.safe_load((Path(run_dir) / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    return upgrade_config(loaded) if isinstance(loaded, dict) else None


def mismatch_message(run_dir: Path, differences: list[tuple[str, Any, Any]], shown: int = 3) -> str:
    """One line for `config error:`: the first differing keys, then how to proceed."""
    def show(value: Any) -> str:
        return "not set" if value == _ABSENT else repr(value)

    # The choice that explains the rest first: a bapo dir rerun with method=ppo differs in
    # every method.bapo.* key, but what to say is that the method differs.
    differences = sorted(differences, key=lambda d: d[0] not in LEADING_KEYS)
    first = [f"{k} is {show(now)} here but {show(old)} there" for k, old, now in differences[:shown]]
    more = len(differences) - shown
    also = f" (and {more} more key{'s' if more > 1 else ''})" if more > 0 else ""
    return (f"{differences[0][0]}: {run_dir} holds a run made with another config: "
            f"{'; '.join(first)}{also}. Give this run its own dir (hydra.run.dir=...) or pass "
            "overwrite=true to move the old one aside")
