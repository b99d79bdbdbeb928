"""logger.entropy_change: the entropy change an update caused on its own mini-batch."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.test_e2e import read_metrics, run_smoke

EPOCHS = ["train.steps=2", "train.staleness=3", "train.staleness_mode=epochs", "eval.every=100",
          "method=ppo"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, smoke_overrides):
    base = tmp_path_factory.mktemp("entropy_change")
    on = run_smoke(base, [*smoke_overrides, *EPOCHS, "logger.entropy_change=true"], "on")
    off = run_smoke(base, [*smoke_overrides, *EPOCHS], "off")
    return pd.DataFrame(read_metrics(on)["update"]), pd.DataFrame(read_metrics(off)["update"])


def test_after_is_the_next_full_batch_update_before(runs):
    # In epochs mode every update of a step scores the same tokens, so update j's
    # "after" is exactly what update j+1's own forward sees before its step.
    on, _ = runs
    for _, step in on.groupby("step"):
        step = step.sort_values("update")
        assert step["entropy_after"].iloc[:-1].tolist() == step["entropy_mean"].iloc[1:].tolist()
    assert (on["entropy_change"] == on["entropy_after"] - on["entropy_mean"]).all()
    assert (on["entropy_change"] != 0).any()


def test_measuring_changes_no_training_number(runs):
    on, off = runs
    assert "entropy_after" not in off
    shared = [c for c in off.columns if not c.startswith("time_")]
    pd.testing.assert_frame_equal(on[shared], off[shared])
