"""benchmarks/bench_levers.py: a lever is a name and Hydra overrides; bad specs are refused."""

from __future__ import annotations

import pytest

from benchmarks.bench_levers import parse_lever


def test_a_lever_is_a_name_and_its_overrides():
    assert parse_lever("both:rollout.behaviour=sampler train.fused_optimizer=true") == (
        "both", ["rollout.behaviour=sampler", "train.fused_optimizer=true"])


@pytest.mark.parametrize("spec", ["rollout.behaviour=sampler", "x:", ":a=1", "base:a=1"])
def test_a_lever_without_name_or_overrides_is_refused(spec):
    with pytest.raises(SystemExit, match="NAME:KEY=VALUE"):
        parse_lever(spec)
