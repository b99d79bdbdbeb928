"""The files of one run dir, read: where run dirs are, its metrics (metrics.jsonl, or
metrics.jsonl.gz in an export, through src/run_files.py; a truncated last line dropped),
config.yaml in today's method layout, and the run's identity."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from src.config_fields import ConfigError
from src.run_files import EITHER, METRICS_NAMES, metrics_bytes, metrics_file
from src.run_vocab import upgrade_method_layout

_SKIP_DIRS = {"tokens", "checkpoints", "__pycache__"}
REPO = Path(__file__).resolve().parents[2]
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def shown_path(path: Path) -> str:
    """A path as a page or report shows it: relative to the repo when inside it, so a page (or a
    screenshot of one) names no machine's layout."""
    path = Path(path).resolve()
    return path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else str(path)


def discover(roots: Iterable[Path]) -> tuple[list[tuple[Path, Path]], list[str]]:
    """(root, dir) of every dir holding run artefacts (either metrics file, or status.json)."""
    found, messages = [], []
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            messages.append(f"{root}: not a directory, nothing read from it")
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            # Hidden dirs (.hydra holds another config.yaml) and run internals are no runs.
            dirnames[:] = sorted(
                d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS
            )
            if "status.json" in filenames or any(n in filenames for n in METRICS_NAMES):
                found.append((root, Path(dirpath)))
                dirnames[:] = []  # a run dir holds no other run dirs
    return found, messages


def read_metrics(run_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Records of a run dir's metrics file, either form; a truncated last line (crash
    mid-write) is dropped."""
    records, notes = [], []
    lines = metrics_bytes(run_dir).splitlines()
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            where = "truncated last line dropped" if i == last else f"corrupt line {i + 1} skipped"
            notes.append(f"metrics.jsonl: {where}")
            continue
        if isinstance(rec, dict):
            records.append(rec)
    return records, notes


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def identity(cfg: dict[str, Any], meta: dict[str, Any], path: Path) -> dict[str, Any] | str:
    """method/staleness/seed/experiment from config, then meta.json, then the path."""

    def get(dotted: str) -> Any:
        node: Any = cfg
        for k in dotted.split("."):
            node = node.get(k) if isinstance(node, dict) else None
        return node

    method = get("method.name") or meta.get("method")
    if not method:
        return "config.yaml has no method.name"
    staleness = (
        get("train.staleness") if get("train.staleness") is not None else meta.get("staleness")
    )
    if staleness is None:
        return "config.yaml has no train.staleness"
    seed = get("seed") if get("seed") is not None else meta.get("seed")
    if seed is None:
        m = re.search(r"seed(\d+)", str(path))
        if not m:
            return "no seed in config.yaml, meta.json or the path"
        seed = m.group(1)
    experiment = get("experiment.name") or meta.get("experiment") or path.parent.parent.name
    return {
        "method": str(method),
        "method_name": str(method),
        "staleness": int(staleness),
        "seed": int(seed),
        "experiment": str(experiment),
    }


def read_config(path: Path) -> dict[str, Any] | str:
    """The run's config.yaml in today's method layout, or why it cannot be read."""
    if not (path / "config.yaml").is_file():
        return "missing config.yaml"
    try:
        if metrics_file(path) is None:
            return f"missing {EITHER}"
    except ConfigError as e:  # both forms: the message says which to delete
        return str(e)
    try:
        cfg = yaml.load((path / "config.yaml").read_text(), Loader=_YAML_LOADER) or {}
    except (OSError, yaml.YAMLError) as e:
        return f"unreadable config.yaml ({type(e).__name__})"
    if not isinstance(cfg, dict):
        return "config.yaml is not a mapping"
    return upgrade_method_layout(cfg)
