"""SIGKILL with data in flight (a full delay queue, a replay buffer), then the same command:
the metrics and token rows equal an uninterrupted run's."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from tests.conftest import REPO, token_rows
from tests.test_e2e import read_metrics
from tests.test_reliability import _cli, _strip_times, kill_after_checkpoint


@pytest.mark.slow
@pytest.mark.parametrize(("source", "held_key"), [
    (["offpolicy.source=delay", "offpolicy.delay=2", "offpolicy.anchor=decoupled"], "queue"),
    (["offpolicy.source=replay", "offpolicy.replay_capacity=2", "offpolicy.replay_draws=1"], "buffer"),
    (["offpolicy.source=partial", "offpolicy.token_budget=6"], "responses"),
], ids=["delay", "replay", "partial"])
def test_sigkill_with_data_in_flight_then_resume_matches(tmp_path, smoke_overrides, source, held_key):
    overrides = [*smoke_overrides, *source, "method=bapo", "train.steps=5", "checkpoint.every=1",
                 "eval.every=5"]
    reference = tmp_path / "reference"
    done = subprocess.run(_cli(overrides, reference), cwd=REPO, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]

    crashed = tmp_path / "crashed"
    kill_after_checkpoint(overrides, crashed, step=3)
    checkpoint = crashed / "checkpoints" / "step_000003.pt"
    held = torch.load(checkpoint, weights_only=False)["schedule"][held_key]
    if held_key == "responses":  # unfinished responses, each token with its log-prob
        assert held and all(len(r.logp_behavior) == len(r.tokens) > 0 for r in held)
    else:  # the queue holds the next two steps' rollouts, the buffer the last two
        assert len(held) == 2 and all(r.logp_behavior is not None for r in held)

    resumed = subprocess.run(_cli(overrides, crashed), cwd=REPO, capture_output=True, text=True,
                             timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming" in resumed.stdout
    a, b = read_metrics(reference), read_metrics(crashed)
    for kind in ("update", "step", "eval"):
        assert _strip_times(a[kind]) == _strip_times(b[kind]), kind
    assert token_rows(reference) == token_rows(crashed)
    assert json.loads((crashed / "status.json").read_text())["status"] == "finished"
