"""One module per off-policy source: its Params are the offpolicy keys, the trainer and the
config name no source, and every scenario yaml picks a registered one."""

from __future__ import annotations

import dataclasses
import re

import pytest
import yaml

from src.config import OffPolicyConfig
from src.schedule.sources import SOURCES
from tests.conftest import REPO, compose

SRC = REPO / "src"


def test_the_trainer_and_the_config_name_no_source():
    # the one name allowed: the value of offpolicy.source's default (the paper's staleness)
    names = "|".join(sorted(SOURCES))
    classes = "|".join(cls.__name__ for cls in SOURCES.values())
    named = re.compile(rf"""["']({names})["']|\b({classes}|InFlight)\b|isinstance\(self\.source""")
    for path in (SRC / "trainer.py", SRC / "config.py", SRC / "generation.py"):
        hits = [f"{path.name}:{i}: {line.strip()}"
                for i, line in enumerate(path.read_text().splitlines(), 1)
                if named.search(line.replace('setting("fresh"', ""))]
        assert hits == [], path


def test_the_offpolicy_section_declares_every_source_parameter_as_the_sources_derive_it():
    from src.schedule.sources import offpolicy_fields

    # the plain dataclass spells each source's keys out; here they are held to the sources'
    derived = offpolicy_fields()
    declared = dataclasses.fields(OffPolicyConfig)[-len(derived):]
    assert [(f.name, f.type, f.default, f.metadata["help"]) for f in declared] == [
        (name, str(kind), f.default, f.metadata["help"]) for name, kind, f in derived]


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_every_source_parameter_is_an_offpolicy_key_with_help(name):
    section = {f.name: f for f in dataclasses.fields(OffPolicyConfig)}
    for f in dataclasses.fields(SOURCES[name].Params):
        assert f.name in section, f.name
        assert section[f.name].default is None  # null unless the source is chosen
        assert section[f.name].metadata["help"].startswith(f"{name} only: ")
        assert f.metadata["help"]
    assert SOURCES[name].help


def test_the_keys_of_one_source_are_its_own():
    owners = {}
    for name, cls in SOURCES.items():
        for f in dataclasses.fields(cls.Params):
            assert f.name not in owners, f"{f.name} of {name} is also {owners[f.name]}'s"
            owners[f.name] = name


def test_every_scenario_picks_a_registered_source_and_validates():
    for path in sorted((REPO / "conf" / "experiment").glob("*.yaml")):
        source = (yaml.safe_load(path.read_text()).get("offpolicy") or {}).get("source")
        if source is None:
            continue
        assert source in SOURCES, path.name
        assert compose([f"experiment={path.stem}"]).offpolicy.source == source
