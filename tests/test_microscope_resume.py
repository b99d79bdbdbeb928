"""A microscope study killed mid-run resumes to the uninterrupted study's tables; one carried
without its trunk (its table alone, as a commit carries it) runs the trunk again, keeps the rows
of the states it reaches equal, and refuses a state that differs without touching its table."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.test_e2e import read_metrics
from tests.test_microscope import _strip_times


def _microscope_cli(overrides, study_dir):
    import sys

    return [sys.executable, "-m", "src.microscope", *overrides, f"microscope.dir={study_dir}"]


OVERRIDES = ["method=ppo", "train.steps=4", "checkpoint.every=1", "checkpoint.keep=2",
             "eval.every=2", "microscope.arms=[ppo,bapo,zero]", "microscope.probe_prompts=2",
             "microscope.correct_problems=4", "microscope.horizon_arms=[ppo]",
             "microscope.horizon_states=[1,3]", "microscope.horizon=1",
             "microscope.horizon_eval_problems=4", "microscope.horizon_eval_samples=1"]


def _run(overrides, study_dir):
    import subprocess

    from tests.conftest import REPO

    return subprocess.run(_microscope_cli(overrides, study_dir), cwd=REPO, capture_output=True,
                          text=True, timeout=900)


@pytest.fixture(scope="module")
def whole_study(tmp_path_factory, smoke_overrides):
    """The study run once, never stopped: what every resumed one must equal."""
    study = tmp_path_factory.mktemp("microscope") / "whole"
    done = _run([*smoke_overrides, *OVERRIDES], study)
    assert done.returncode == 0, done.stderr[-3000:]
    return study


def _table(study, name, times=False):
    t = pd.read_parquet(study / name)
    if not times:
        t = t.drop(columns=[c for c in t.columns if c.startswith("time_")])
    return t.sort_values([c for c in ("rollout", "update", "arm") if c in t.columns],
                         ignore_index=True)


@pytest.mark.slow
def test_a_killed_study_resumes_to_the_uninterrupted_studys_tables(tmp_path, smoke_overrides,
                                                                   whole_study):
    """SIGKILL after the trunk's checkpoint at step 2, then the same command: the branch and
    horizon tables equal those of a study never stopped (timings aside), and the trunk's records
    the uninterrupted trunk's."""
    import os
    import signal
    import subprocess
    import time

    from tests.conftest import REPO

    overrides, whole, cut = [*smoke_overrides, *OVERRIDES], whole_study, tmp_path / "cut"
    proc = subprocess.Popen(_microscope_cli(overrides, cut), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline, checkpoint = time.time() + 600, cut / "trunk" / "checkpoints" / "step_000002.pt"
    while not checkpoint.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert checkpoint.exists() and proc.poll() is None, "the study never reached step 2 alive"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    again = _run(overrides, cut)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming" in again.stdout
    for name in ("branches.parquet", "horizons.parquet"):
        pd.testing.assert_frame_equal(_table(cut, name), _table(whole, name))
    a, b = read_metrics(whole / "trunk"), read_metrics(cut / "trunk")
    for kind in ("update", "step", "eval"):
        assert _strip_times(a[kind]) == _strip_times(b[kind])


def _carry(whole, to, last_rollout):
    """The study dir as a commit carries it: its settings, probes and the rows of rollouts
    0..last_rollout (a study stopped there), no trunk."""
    import shutil

    to.mkdir()
    for name in ("microscope.yaml", "probes.pt"):
        shutil.copy(whole / name, to / name)
    rows = pd.read_parquet(whole / "branches.parquet")
    rows[rows["rollout"] <= last_rollout].to_parquet(to / "branches.parquet", index=False)


@pytest.mark.slow
def test_a_study_carried_without_its_trunk_keeps_the_rows_it_reaches_equal(
        tmp_path, smoke_overrides, whole_study):
    carried = tmp_path / "carried"
    _carry(whole_study, carried, last_rollout=1)
    kept = pd.read_parquet(carried / "branches.parquet")
    done = _run([*smoke_overrides, *OVERRIDES], carried)
    assert done.returncode == 0, done.stderr[-3000:]
    states = kept.groupby(["rollout", "update"]).ngroups
    assert states > 0 and done.stdout.count("read equal; its rows kept") == states
    for name in ("branches.parquet", "horizons.parquet"):
        pd.testing.assert_frame_equal(_table(carried, name), _table(whole_study, name))
    # kept, not made again: even the recorded rows' timings are the first study's
    mine = _table(carried, "branches.parquet", times=True)
    theirs = _table(whole_study, "branches.parquet", times=True)
    early = mine["rollout"] <= 1
    pd.testing.assert_frame_equal(mine[early], theirs[early])
    assert not mine.loc[~early, "time_update_s"].equals(theirs.loc[~early, "time_update_s"])


@pytest.mark.slow
def test_a_carried_study_refuses_a_state_that_differs_and_keeps_its_table(
        tmp_path, smoke_overrides, whole_study):
    carried = tmp_path / "carried"
    _carry(whole_study, carried, last_rollout=3)
    rows = pd.read_parquet(carried / "branches.parquet")
    earliest = rows.sort_values(["rollout", "update"]).iloc[0]
    first = (rows["rollout"] == earliest["rollout"]) & (rows["update"] == earliest["update"])
    rows.loc[first, "entropy_before"] += 1e-9  # one last-bit-sized change of the weights' reading
    rows.to_parquet(carried / "branches.parquet", index=False)
    before = (carried / "branches.parquet").read_bytes()
    done = _run([*smoke_overrides, *OVERRIDES], carried)
    assert done.returncode != 0
    assert "ran again to another state" in done.stderr and "entropy_before" in done.stderr
    assert (carried / "branches.parquet").read_bytes() == before


def test_a_resume_from_another_commit_is_added_to_the_study_settings(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import yaml

    import src.run_vocab
    from src.microscope.study import write_settings

    study = SimpleNamespace(dir=tmp_path, trunk_args=["seed=0"],
                            settings=SimpleNamespace(to_container=lambda: {"last": 3}))
    for commit in ("a" * 40, "a" * 40, "b" * 40, "b" * 40, "c" * 40):
        monkeypatch.setattr(src.run_vocab, "git_commit", lambda commit=commit: commit)
        write_settings(study)
    stored = yaml.safe_load((tmp_path / "microscope.yaml").read_text())
    assert stored == {"settings": {"last": 3}, "trunk_overrides": ["seed=0"], "commit": "a" * 40,
                      "resumed_at": ["b" * 40, "c" * 40]}
