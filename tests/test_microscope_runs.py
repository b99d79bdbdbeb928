"""The update microscope on other trunks and sources: every registered method as an arm, the
branch equal to the trunk's update for trunks that search, draw or decide once per rollout,
and the trunk equal to the run behind every off-policy source (tests/test_microscope.py has
the core checks on one study)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

from src.run import execute
from tests.conftest import compose, token_rows
from tests.test_e2e import read_metrics
from tests.test_microscope import Recording, _strip_times

METHODS = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "conf" / "method").glob("*.yaml"))


def _run_study(tmp_path, overrides, settings, scope_cls=Recording):
    from src.microscope.study import prepare, study_label, write_settings

    s = prepare([*overrides, *settings, f"microscope.dir={tmp_path / 'study'}"])
    write_settings(s)
    scope = scope_cls(s.settings, s.arms, s.dir, study_label(s.cfg), s.horizon_arms)
    assert execute(s.cfg, s.trunk_dir, overrides=s.trunk_args, observe=scope.attach) == "finished"
    return scope, pd.read_parquet(s.dir / "branches.parquet")


@pytest.mark.slow
def test_every_registered_method_is_an_arm(tmp_path, smoke_overrides):
    """Every conf/method option branches from the same stale state: one row each, a step taken
    (or its skip named), finite readings, a non-negative KL."""
    _, table = _run_study(tmp_path, [*smoke_overrides, "method=ppo", "train.steps=1"],
                          [f"microscope.arms=[{','.join(METHODS)}]", "microscope.updates=[1]",
                           "microscope.probe_prompts=2", "microscope.correct_problems=4"])
    assert sorted(table["arm"]) == METHODS
    assert table["d_entropy"].notna().all() and (table["kl"] >= 0).all()
    assert (table["skipped"] == table["skip_reason"].notna()).all()


@pytest.mark.slow
@pytest.mark.parametrize("trunk", ["bapo", "clip_cov", "top_entropy"])
def test_a_branch_is_the_trunks_update_for_other_trunk_methods(tmp_path, smoke_overrides, trunk):
    """BAPO (a search per update), clip_cov (a seeded random draw) and top_entropy with its
    once-per-rollout decision as trunks: the branch of the trunk's method is its update."""
    extra = ["method.top_entropy.scope=rollout"] if trunk == "top_entropy" else []
    scope, table = _run_study(tmp_path, [*smoke_overrides, f"method={trunk}", "train.steps=2", *extra],
                              [f"microscope.arms=[{trunk},zero]", "microscope.probe_prompts=2",
                               "microscope.correct_problems=4"])
    assert len(scope.branch_weights) == len(scope.trunk_weights) == 4
    for branch, own in zip(scope.branch_weights, scope.trunk_weights, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(branch, own, strict=True))
    assert all(before == after for before, after in scope.digests)


@pytest.mark.slow
@pytest.mark.parametrize("source", [
    ["offpolicy.source=delay", "offpolicy.delay=1"],
    ["offpolicy.source=replay", "offpolicy.replay_capacity=2", "offpolicy.replay_draws=1"],
    ["offpolicy.source=partial", "offpolicy.token_budget=16"],
    ["rollout.precision=int8", "correction=tis"],
], ids=["delay", "replay", "partial", "int8_tis"])
def test_the_trunk_is_the_run_under_every_off_policy_source(tmp_path, smoke_overrides, source):
    """Behind a delay queue, with replay, with partial rollouts, and with a low-precision
    sampler and its correction, the branches leave the trunk's data and records untouched."""
    overrides = [*smoke_overrides, "method=ppo", "train.steps=3", "logger.token_fraction=1.0", *source]
    plain = tmp_path / "plain"
    assert execute(compose(overrides), plain) == "finished"
    scope, table = _run_study(tmp_path, overrides, ["microscope.arms=[ppo,bapo,noclip]",
                                                    "microscope.probe_prompts=2",
                                                    "microscope.correct_problems=4"])
    trunk = scope.study_dir / "trunk"
    a, b = read_metrics(plain), read_metrics(trunk)
    for kind in ("update", "step", "eval"):
        assert _strip_times(a[kind]) == _strip_times(b[kind])
    assert token_rows(trunk) == token_rows(plain)
    assert len(table) > 0 and all(x == y for x, y in scope.digests)
    for branch, own in zip(scope.branch_weights, scope.trunk_weights, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(branch, own, strict=True))
