"""Which run dir a config writes to, and whether an existing run dir holds the same run.

Two layers keep runs from colliding:

- the dir name: `runs/<experiment>/<method>/[<tag>/]seed<N>`, where the tag lists the
  command-line overrides that can change the numbers (Hydra's `hydra.job.override_dirname`,
  with the keys below excluded in conf/config.yaml), or is a short hash of them when the
  list is long or holds characters a dir name should not (the full list is in meta.json);
- the config itself: before a run dir is skipped or resumed, the config it was made with
  (its config.yaml) is compared with this run's, ignoring `NON_NUMERIC_KEYS`; any other
  difference refuses the run (exit 2) and names the first differing keys.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

# Keys (and everything under them) that change no number a run computes: where it runs
# from, how it is displayed and logged, and what it keeps on disk. The override tag and the
# config comparison both ignore them; conf/config.yaml's exclude_keys must list them too
# (a test checks), and analysis/cells.py reads the same list when it groups runs.
NON_NUMERIC_KEYS = (
    "resume",
    "overwrite",
    "cache_dir",
    "experiment.description",
    "logger.backend",
    "logger.project",
    "logger.mode",
    "logger.progress",
    "checkpoint.every",
    "checkpoint.keep",
    "checkpoint.keep_final",
)
# Before each method owned its parameters, config.yaml kept them flat under `method:`
# (method.c_low, method.q, method.entropy_scope, method.bapo.*). Old layout -> the
# objective's section, per objective; analysis/loader.py keeps the same map (a test checks).
LEGACY_METHOD_PARAMS = {
    "ppo": {"c_low": "c_low", "c_high": "c_high", "dual_clip_c": "dual_clip_c"},
    "clip_higher": {"c_low": "c_low", "c_high": "c_high", "dual_clip_c": "dual_clip_c"},
    "top_entropy": {"c_low": "c_low", "c_high": "c_high", "dual_clip_c": "dual_clip_c", "q": "q",
                    "entropy_scope": "scope"},
    "bapo": {"dual_clip_c": "dual_clip_c"},  # and everything under the old method.bapo
}
LEADING_KEYS = ("method.name", "method.objective", "experiment.name", "task.name", "model.name")
# Sections added to config.yaml after runs were committed, with the values those runs
# used: a config.yaml without the section was made with these (a test keeps them equal to
# the dataclass defaults in src/config.py).
ADDED_SECTIONS = {
    "offpolicy": {"source": "fresh", "anchor": "coupled", "weight_cap": 2.0, "delay": None,
                  "replay_capacity": None, "replay_draws": None, "token_budget": None,
                  "mask_stale_prefix": None},
}
# The parts of the path itself: never repeated in the tag.
PATH_KEYS = ("experiment", "method", "seed")
MAX_TAG_CHARS = 80
_SAFE_TAG = re.compile(r"[A-Za-z0-9._,=+-]+")
_ABSENT = "<absent>"


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


def is_non_numeric(key: str) -> bool:
    return any(key == k or key.startswith(f"{k}.") for k in NON_NUMERIC_KEYS)


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """{'a.b': leaf}; an empty dict and a list are leaves."""
    if isinstance(node, dict) and node:
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: node}


def config_differences(stored: dict, current: dict) -> list[tuple[str, Any, Any]]:
    """(key, stored value, current value) for every key that can change the numbers."""
    a, b = flatten(stored), flatten(current)
    keys = sorted(k for k in set(a) | set(b) if not is_non_numeric(k))
    return [(k, a.get(k, _ABSENT), b.get(k, _ABSENT)) for k in keys
            if a.get(k, _ABSENT) != b.get(k, _ABSENT)]


def upgrade_method_layout(cfg: dict) -> dict:
    """`cfg` with an old-layout `method:` section (flat parameters) in today's layout."""
    method = cfg.get("method")
    if not isinstance(method, dict) or "c_low" not in method:
        return cfg  # today's layout: the shared keys and method.<objective>
    objective = method.get("objective")
    new = {k: method[k] for k in ("name", "objective", "aggregation") if k in method}
    # bapo's own parameters already had their section, method.bapo
    nested = method.get(objective)
    section = dict(nested) if isinstance(nested, dict) else {}
    section.update({new_key: method[old] for old, new_key in LEGACY_METHOD_PARAMS.get(objective, {}).items()
                    if old in method})
    new[objective] = section
    return {**cfg, "method": new}


def stored_config(run_dir: Path) -> dict | None:
    """The config.yaml a run dir was made with, in today's layout; None when it has none
    (or it is unreadable)."""
    import yaml

    try:
        loaded = yaml.safe_load((Path(run_dir) / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    return upgrade_config(loaded) if isinstance(loaded, dict) else None


def upgrade_config(cfg: dict) -> dict:
    """A stored config in today's layout: the method's section, and every section added
    since with the values the run used (`ADDED_SECTIONS`)."""
    cfg = upgrade_method_layout(cfg)
    missing = {k: dict(v) for k, v in ADDED_SECTIONS.items() if k not in cfg}
    return {**cfg, **missing} if missing else cfg


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
