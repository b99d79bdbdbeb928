"""Experiment versions: a new version of an experiment changes only what it says it changes.

`smol_4x_v2` is smol_4x with the step levers on and its evals where they count;
`smol_4x_bf16` is v2 under bf16 autocast on native kernels (docs/pretrained.md). The fields
compared are the whole composed config, so a key that moved by accident fails here.
"""

from __future__ import annotations

import pytest

from src.build import compose_config
from src.config import to_container


def compose(overrides: list[str]):
    """The validated Config, without the check of what its values need installed: these
    tests read configs, and CI has no model package."""
    return compose_config(overrides, installed=False)


V2_CHANGES = {
    ("experiment", "name"): ("smol_4x", "smol_4x_v2"),
    ("train", "shared_prefix"): (False, True),
    ("train", "pack"): (None, 0.1),
    ("rollout", "behaviour"): ("scored", "sampler"),
    ("eval", "at"): (None, [10, 20, 25, 30]),
    ("eval", "final_problems"): (None, 180),
}


def _flat(config) -> dict:
    out = {}
    for section, values in to_container(config).items():
        if isinstance(values, dict):
            out.update({(section, key): value for key, value in values.items()})
        else:
            out[(section,)] = values
    return out


def _differences(before: dict, after: dict) -> dict:
    keys = (set(before) | set(after)) - {("experiment", "description")}
    return {k: (before.get(k), after.get(k)) for k in keys if before.get(k) != after.get(k)}


def test_smol_4x_v2_is_smol_4x_with_the_levers_and_the_evals_where_they_count():
    base, v2 = _flat(compose(["experiment=smol_4x"])), _flat(compose(["experiment=smol_4x_v2"]))
    assert _differences(base, v2) == V2_CHANGES


def test_the_bf16_lane_is_v2_under_bf16_autocast_on_native_kernels():
    v2 = _flat(compose(["experiment=smol_4x_v2"]))
    bf16 = _flat(compose(["experiment=smol_4x_bf16", "numerics=native"]))
    diff = _differences(v2, bf16)
    assert diff.pop(("experiment", "name")) == ("smol_4x_v2", "smol_4x_bf16")
    assert diff.pop(("model", "autocast")) == (None, "bfloat16")
    assert diff.pop(("numerics",))[1] == "native"
    assert diff == {}


def test_the_bf16_lane_without_native_numerics_on_the_command_line_is_refused():
    """The mode is fixed when torch loads (src/_numerics.py): the yaml alone cannot set it,
    and portable bf16 is about 20x slower, so the run is refused before any work."""
    from src.config import ConfigError
    from src.preflight import check_numerics

    cfg = compose(["experiment=smol_4x_bf16"])
    assert cfg.numerics == "native"  # the yaml's; this test process loaded torch portable
    with pytest.raises(ConfigError, match=r"^numerics: the config says 'native' but torch "
                                          r"loaded in 'portable'.*give numerics=native on the "
                                          r"command line"):
        check_numerics(cfg)
