"""A microscope study killed mid-run resumes to the uninterrupted study's tables."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.test_e2e import read_metrics
from tests.test_microscope import _strip_times


def _microscope_cli(overrides, study_dir):
    import sys

    return [sys.executable, "-m", "src.microscope", *overrides, f"microscope.dir={study_dir}"]


@pytest.mark.slow
def test_a_killed_study_resumes_to_the_uninterrupted_studys_tables(tmp_path, smoke_overrides):
    """SIGKILL after the trunk's checkpoint at step 2, then the same command: the branch and
    horizon tables equal those of a study never stopped (timings aside), and the trunk's records
    the uninterrupted trunk's."""
    import os
    import signal
    import subprocess
    import time

    from tests.conftest import REPO

    overrides = [*smoke_overrides, "method=ppo", "train.steps=4", "checkpoint.every=1",
                 "checkpoint.keep=2", "eval.every=2", "microscope.arms=[ppo,bapo,zero]",
                 "microscope.probe_prompts=2", "microscope.correct_problems=4",
                 "microscope.horizon_arms=[ppo]", "microscope.horizon_states=[1,3]",
                 "microscope.horizon=1", "microscope.horizon_eval_problems=4",
                 "microscope.horizon_eval_samples=1"]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    done = subprocess.run(_microscope_cli(overrides, whole), cwd=REPO, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    proc = subprocess.Popen(_microscope_cli(overrides, cut), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline, checkpoint = time.time() + 600, cut / "trunk" / "checkpoints" / "step_000002.pt"
    while not checkpoint.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert checkpoint.exists() and proc.poll() is None, "the study never reached step 2 alive"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    again = subprocess.run(_microscope_cli(overrides, cut), cwd=REPO, capture_output=True,
                           text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming" in again.stdout

    def table(study, name):
        t = pd.read_parquet(study / name)
        return t.drop(columns=[c for c in t.columns if c.startswith("time_")]).sort_values(
            [c for c in ("rollout", "update", "arm") if c in t.columns], ignore_index=True)

    for name in ("branches.parquet", "horizons.parquet"):
        pd.testing.assert_frame_equal(table(cut, name), table(whole, name))
    a, b = read_metrics(whole / "trunk"), read_metrics(cut / "trunk")
    for kind in ("update", "step", "eval"):
        assert _strip_times(a[kind]) == _strip_times(b[kind])
