"""Which runs are seeds of one cell, and which cells can be compared (a suite).

A cell is one experiment, one method and one value of every config key that can change the
numbers: only seeds differ inside it. So a 3-step `smoke` run with staleness 2 is never a
seed of the `staleness_2x` cell, and a `train.lr=1e-4` run never a seed of the default one.

A suite is a set of cells that differ only in what a comparison varies: the method (name
and parameters), the staleness and the experiment's name. The paper grid
(staleness_1x..8x, every method, the default config) is one suite; `smoke` is another; a
calibration sweep at another lr is a third. Figures and claims are drawn per suite.

Inside a suite a method is shown by its name, or, when the suite holds that method with
several parameter sets (a rho0 sweep), by its name and the parameters that differ:
`bapo (bapo.rho0=0.3)`. Where one of the sets is the method's own (conf/method/<name>.yaml),
that one keeps the plain name and the others name what they change from it, so an ablation
beside the main runs leaves the main runs' label alone: `bapo`, `bapo (bapo.low_start=0.8)`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import Any

from src.run_vocab import ADDED_SECTIONS, NON_NUMERIC_KEYS, applies, flatten

# What a comparison varies inside one suite.
COMPARED = ("method", "experiment.name", "train.staleness")
# The step budget may vary with the staleness inside a suite when the levels are compared at
# equal updates (the ramble testbed: 1x 120 rollouts, 4x 30, evals every 20 updates); the
# paper grid compares at equal rollouts, so its budget is one and the rule changes nothing.
# Any other difference in steps (smoke's 3 against 4, random rewards at 30 and 100) is two
# comparisons and splits the suite.
BUDGET = ("train.steps", "eval.every")
MAX_SHOWN_KEYS = 3
METHOD_CONF = Path(__file__).resolve().parents[2] / "conf" / "method"


def _under(key: str, prefixes: tuple[str, ...]) -> bool:
    return any(key == p or key.startswith(f"{p}.") for p in prefixes)


def numeric_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """Every key of a run's config that can change its numbers, seed excluded; keys of a
    section added since runs were committed count only where they leave its old values,
    and keys that apply under another key's value only (the decoupled anchor's weight cap)
    only there."""
    added = flatten(ADDED_SECTIONS)
    flat = flatten(cfg)
    return {k: v for k, v in flat.items()
            if k != "seed" and not _under(k, NON_NUMERIC_KEYS) and applies(k, flat)
            and not (k in added and added[k] == v)}


def _key(items: dict[str, Any]) -> str:
    return json.dumps(sorted(items.items()), default=str)


def _digest(text: str, n: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def cell_key(cfg: dict[str, Any]) -> str:
    return _key(numeric_config(cfg))


@cache
def _method_defaults_key(name: str) -> str | None:
    if not (METHOD_CONF / f"{name}.yaml").is_file():
        return None
    # late: the method registry (torch) only when labels need it. The yaml with its
    # defaults list followed (the objective's dataclass defaults, a parent method's file),
    # as `--cfg job` prints the method section
    from src.method_yaml import load_method_yaml

    cfg = load_method_yaml(name)
    params = {k[len("method."):]: v for k, v in numeric_config({"method": cfg}).items()
              if k != "method.name"}
    return _key(params)


def method_defaults(name: str) -> dict[str, Any] | None:
    """The numeric parameters of conf/method/<name>.yaml, its defaults list followed, as
    `<key>: value` without the `method.` prefix (as the labels show them); None when there
    is no such yaml."""
    key = _method_defaults_key(name)
    return None if key is None else dict(json.loads(key))


def _is_default(name: str, params: dict[str, Any]) -> bool:
    defaults = method_defaults(name)
    return defaults is not None and all(
        json.dumps(params.get(k), default=str) == json.dumps(v, default=str)
        for k, v in defaults.items())


def variant_label(name: str, changed: str) -> str:
    """A method's label when it ran with other parameters: `bapo (bapo.low_start=0.8)`."""
    return f"{name} ({changed})"


def split_variant(label: str) -> tuple[str, str]:
    """(method name, the parameters a variant changes) of a label; ('bapo', '') for a plain
    one. The one reader of the label format `variant_label` writes."""
    name, _, changed = label.partition(" (")
    return name, changed.rstrip(")")


def _shown(items: dict[str, Any]) -> str:
    pairs = [f"{k}={v}" for k, v in sorted(items.items())]
    extra = f", +{len(pairs) - MAX_SHOWN_KEYS} more" if len(pairs) > MAX_SHOWN_KEYS else ""
    return ", ".join(pairs[:MAX_SHOWN_KEYS]) + extra


def _differing(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per config, the items whose value is not the same in all of `configs`."""
    keys = set().union(*configs)
    varying = {k for k in keys if len({json.dumps(c.get(k), default=str) for c in configs}) > 1}
    return [{k: c.get(k) for k in sorted(varying)} for c in configs]


def experiment_order(names_and_staleness: set[tuple[str, int]]) -> list[str]:
    return [name for name, _ in sorted(names_and_staleness, key=lambda e: (e[1], e[0]))]


def one_update_budget(budgets: set[tuple[int, int, int]]) -> bool:
    """Whether staleness levels, as (steps, updates per step, eval.every) of each run, differ
    in their step budget only so that every level makes the same number of optimizer updates
    with its evals at the same update counts (120 steps at 1x, 30 at 4x). The one rule for
    both a suite across budgets (Grouping) and the curves' update axis (plotting.step_axis)."""
    return (len({steps for steps, _, _ in budgets}) > 1
            and len({steps * k for steps, k, _ in budgets}) == 1
            and len({every * k for _, k, every in budgets}) == 1)


def _equal_updates(runs: list[Any], numeric: dict[int, dict]) -> bool:
    return one_update_budget({(numeric[id(r)].get("train.steps", 0), r.staleness,
                               numeric[id(r)].get("eval.every", 0)) for r in runs})


class Grouping:
    """Cells and suites of a list of runs (anything with .config, .experiment, .staleness,
    .method); `assign` writes .cell, .suite, .suite_slug and the display .method."""

    def __init__(self, runs: list[Any]):
        self.runs = runs

    def assign(self) -> list[str]:
        """Set each run's cell, suite and method label; returns the suites, largest first."""
        by_suite: dict[str, list[Any]] = defaultdict(list)
        numeric = {id(r): numeric_config(r.config) for r in self.runs}
        loose: dict[str, list[Any]] = defaultdict(list)
        for run in self.runs:
            run.cell = _digest(_key(numeric[id(run)]), 12)
            rest = {k: v for k, v in numeric[id(run)].items() if not _under(k, COMPARED + BUDGET)}
            loose[_key(rest)].append(run)
        for key, runs in loose.items():
            if _equal_updates(runs, numeric):
                by_suite[key] = runs  # levels at equal updates: one suite across budgets
                continue
            # one budget (every suite made before equal updates): keyed as before, so the
            # committed reports' suite dirs keep their names
            for run in runs:
                rest = {k: v for k, v in numeric[id(run)].items() if not _under(k, COMPARED)}
                by_suite[_key(rest)].append(run)
        labels = self._suite_labels(by_suite, numeric)
        order = sorted(by_suite, key=lambda k: (-len(by_suite[k]), labels[k]))
        for key in order:
            for run in by_suite[key]:
                run.suite = labels[key]
                run.suite_slug = _slug(labels[key], key)
            self._method_labels(by_suite[key], numeric)
        return [labels[k] for k in order]

    @staticmethod
    def _suite_labels(by_suite: dict[str, list[Any]], numeric: dict[int, dict]) -> dict[str, str]:
        """The suite's experiments; where two suites share them, the keys that differ; and for
        every suite but the largest one (the main grid) also the keys where it differs from
        that one, so that e.g. a random-reward suite says so in its name."""
        names = {k: ", ".join(experiment_order({(r.experiment, r.staleness) for r in runs}))
                 for k, runs in by_suite.items()}

        def rest(suite: str) -> dict[str, Any]:
            return {k: v for k, v in numeric[id(by_suite[suite][0])].items()
                    if not _under(k, COMPARED)}

        shown: dict[str, dict[str, Any]] = {k: {} for k in by_suite}
        for name in set(names.values()):
            same = [k for k in by_suite if names[k] == name]
            if len(same) < 2:
                continue
            for s, diff in zip(same, _differing([rest(s) for s in same]), strict=True):
                shown[s] = diff
        largest = max(by_suite, key=lambda k: (len(by_suite[k]), names[k]), default=None)
        for s in by_suite:
            if s != largest:  # e.g. task.reward=random, even where a sibling shares it
                shown[s] = {**_differing([rest(largest), rest(s)])[1], **shown[s]}
        return {s: f"{names[s]} [{_shown(shown[s])}]" if shown[s] else names[s]
                for s in by_suite}

    @staticmethod
    def _method_labels(runs: list[Any], numeric: dict[int, dict]) -> None:
        by_name: dict[str, dict[str, dict]] = defaultdict(dict)
        for run in runs:
            params = {k[len("method."):]: v for k, v in numeric[id(run)].items()
                      if k.startswith("method.") and k != "method.name"}
            by_name[run.method_name][_key(params)] = params
        label_of: dict[tuple[str, str], str] = {}
        for name, variants in by_name.items():
            if len(variants) == 1:
                label_of[(name, next(iter(variants)))] = name
                continue
            keys = list(variants)
            plain = [k for k in keys if _is_default(name, variants[k])]
            if len(plain) == 1:  # the method's own parameters keep its name
                for key in keys:
                    diff = _differing([variants[plain[0]], variants[key]])[1]
                    label_of[(name, key)] = (name if key == plain[0]
                                            else variant_label(name, _shown(diff)))
                continue
            for key, diff in zip(keys, _differing([variants[k] for k in keys]), strict=True):
                label_of[(name, key)] = variant_label(name, _shown(diff))
        labels = list(label_of.values())
        for (name, key), label in list(label_of.items()):
            if labels.count(label) > 1:  # variants that differ beyond the keys shown
                label_of[(name, key)] = f"{label} #{_digest(key, 4)}"
        for run in runs:
            params = {k[len("method."):]: v for k, v in numeric[id(run)].items()
                      if k.startswith("method.") and k != "method.name"}
            run.method = label_of[(run.method_name, _key(params))]
        # Two experiments of one staleness in one suite: name the experiment too.
        cells: dict[tuple[str, int], set[str]] = defaultdict(set)
        for run in runs:
            cells[(run.method, run.staleness)].add(run.experiment)
        for run in runs:
            if len(cells[(run.method, run.staleness)]) > 1:
                run.method = f"{run.method} [{run.experiment}]"


def _slug(label: str, key: str) -> str:
    """A dir name for a suite's figures: readable start, a hash for uniqueness."""
    short = re.sub(r"[A-Za-z0-9_]+\.(?=[A-Za-z0-9_.]+=)", "", label)  # task.reward= -> reward=
    readable = re.sub(r"[^A-Za-z0-9._=-]+", "_", short).strip("_")[:80].rstrip("_")
    return f"{readable}-{_digest(key, 6)}"
