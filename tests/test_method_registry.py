"""One definition per method: its dataclass holds the defaults, its yaml repeats them,
nothing else in the code names a method, and old run dirs still read."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from src.algorithms import METHODS
from src.config import validate_method
from src.integrations._common import available_methods, load_method_yaml
from tests.conftest import REPO, compose

SRC = REPO / "src"


@pytest.mark.parametrize("objective", sorted(METHODS))
def test_every_method_has_its_yaml_with_the_dataclass_defaults(objective):
    # conf/method/<objective>.yaml is the method at its defaults: the dataclass is the one
    # place they are defined, and the yaml (read by --cfg job) must not drift from it.
    raw = yaml.safe_load((REPO / "conf" / "method" / f"{objective}.yaml").read_text())
    assert raw["objective"] == objective and raw["name"] == objective
    assert raw[objective] == dataclasses.asdict(METHODS[objective].Params())


@pytest.mark.parametrize("objective", sorted(METHODS))
def test_every_parameter_says_what_it_is(objective):
    for name, text in METHODS[objective].Params.help().items():
        assert text.strip(), f"{objective}.{name} has no help text"


@pytest.mark.parametrize("label", available_methods())
def test_every_method_yaml_validates_and_names_only_its_parameters(label):
    method = validate_method(load_method_yaml(label))
    assert method.name == label
    section = load_method_yaml(label)[method.objective]
    fields = {f.name for f in dataclasses.fields(METHODS[method.objective].Params)}
    assert set(section) <= fields
    assert compose([f"method={label}"]).method.to_container() == method.to_container()


def test_bapo_official_runs_the_recipes_dual_clip():
    assert compose(["method=bapo_official"]).method.params.dual_clip_c == 3.0


def _source_files(where: Path) -> list[Path]:
    return sorted(where.rglob("*.py"))


def test_no_code_outside_a_methods_own_file_branches_on_its_name():
    # analysis/ included: it reads what a method is from its traits (method.traits), and
    # names only the paper's baseline and proposed method, once (analysis/style.py).
    names = "|".join(sorted(METHODS))
    branch = re.compile(rf"""(objective|method)\S*\s*(==|!=|in)\s*[\(\[]?\s*["']({names})["']""")
    starts = re.compile(rf"""(objective|method)\S*\.startswith\(\s*["']({names})""")
    own = SRC / "algorithms" / "methods"
    hits = [f"{p.relative_to(REPO)}:{i}: {line.strip()}"
            for p in _source_files(SRC) + _source_files(REPO / "analysis") if own not in p.parents
            for i, line in enumerate(p.read_text().splitlines(), 1)
            if branch.search(line) or starts.search(line)]
    assert hits == []


def test_each_method_writes_its_traits_and_old_runs_get_the_registrys():
    from analysis.loader import Run, registry_traits

    bapo = compose(["method=bapo_value"]).method.to_container()
    assert bapo["traits"] == METHODS["bapo"].traits.to_config()
    assert bapo["traits"]["adaptive_bounds"] and not METHODS["ppo"].traits.adaptive_bounds
    old = Run("r", Path("r"), "smoke", "bapo_value", 2, 0, "finished",
              {"method": {"name": "bapo_value", "objective": "bapo"}}, [0], [])
    assert old.traits == registry_traits("bapo") == METHODS["bapo"].traits
    new = Run("r", Path("r"), "smoke", "x", 2, 0, "finished",
              {"method": {"name": "x", "objective": "x", "traits": bapo["traits"]}}, [0], [])
    assert new.traits == METHODS["bapo"].traits


def test_old_runs_of_an_earlier_definition_under_the_same_name_get_no_traits():
    # m2po's runs made before it became the authors' clip (experiments/results/staleness_4x/
    # m2po) hold its masking rule's `tau` and no traits: they get none, not today's bounds
    from analysis.loader import Run
    from analysis.search_outcomes import searches_bounds
    from src.run_vocab import MethodTraits

    def run(params):
        return Run("r", Path("r"), "staleness_4x", "m2po", 4, 0, "finished",
                   {"method": {"name": "m2po", "objective": "m2po", "m2po": params}}, [0], [])

    assert run({"tau": 0.04}).traits == MethodTraits()
    today = run({"budget": 0.04})
    assert today.traits == METHODS["m2po"].traits and today.traits.adaptive_bounds
    # its bounds are adaptive, but solved, not searched: bapo's search tables leave it out
    assert not searches_bounds(today)


def test_bapos_traits_name_the_numbers_its_decision_logs():
    import torch

    traits = METHODS["bapo"].traits
    method = METHODS["bapo"]()
    logp = torch.zeros(1, 3)
    record = method.decide(method.decision_inputs(logp, logp, torch.tensor([1.0]),
                                                  torch.ones(1, 3, dtype=torch.bool))).record
    keys = (traits.measure, traits.measure_at_start, traits.moved, traits.reached, traits.undefined)
    assert set(keys) <= set(record)


def test_plugs_reach_neither_into_the_trainer_nor_into_run_internals():
    for p in _source_files(SRC / "integrations"):
        text = p.read_text()
        assert "src.trainer" not in text, p
        assert not re.search(r"from src\.run import _|src\.run\._", text), p


def test_old_layout_configs_read_as_todays():
    """Configs of run dirs made before methods owned their parameters (the staleness_4x
    seed-0 configs of the earlier AdamW reproduction, kept in tests/data) read as the
    method's yaml today; only bapo_official differs, by the recipe's dual-clip it now has."""
    from src.config import to_container
    from src.run_dir import config_differences, stored_config
    from src.run_vocab import ADDED_SECTIONS, flatten

    runs = sorted((REPO / "tests" / "data" / "old_layout_runs").glob("*"))
    assert len(runs) == 8
    for run_dir in runs:
        raw = yaml.safe_load((run_dir / "config.yaml").read_text())
        assert "c_low" in raw["method"]  # the old layout
        upgraded = stored_config(run_dir)
        # sections added since read as the values those runs used
        assert flatten({k: upgraded[k] for k in ADDED_SECTIONS}).items() >= flatten(ADDED_SECTIONS).items()
        name = upgraded["method"]["name"]
        today = to_container(compose([f"method={name}"]))["method"]
        today.pop("traits")  # derived from the objective, never stored by old runs
        diffs = config_differences(upgraded["method"], today)
        expected = [("bapo.dual_clip_c", None, 3.0)] if name == "bapo_official" else []
        assert diffs == expected, run_dir
