"""Faults inflicted on purpose: SIGKILL mid-run, NaNs, all-equal rewards."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import src.policy as policy_module
from src.run import execute
from tests.conftest import REPO, compose
from tests.test_e2e import read_metrics


def _strip_times(records):
    return [{k: v for k, v in r.items() if not k.startswith("time_")} for r in records]


def _has_update_of_step(run_dir, step):
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record["kind"] == "update" and record["step"] == step:
            return True
    return False


def _cli(overrides, run_dir):
    return [sys.executable, "-m", "src.run", *overrides, f"hydra.run.dir={run_dir}"]


def kill_after_checkpoint(overrides, run_dir, step: int) -> subprocess.Popen:
    """Start the run, wait for its checkpoint after `step` steps and some update rows of
    step `step` that it does not cover, then SIGKILL it; returns the killed process."""
    proc = subprocess.Popen(_cli(overrides, run_dir), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 600
    checkpoint = run_dir / "checkpoints" / f"step_{step:06d}.pt"
    while not checkpoint.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert checkpoint.exists(), f"the run never reached its checkpoint after step {step}"
    while not _has_update_of_step(run_dir, step) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.01)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return proc


@pytest.mark.slow
def test_sigkill_then_resume_matches_uninterrupted_run(tmp_path, smoke_overrides):
    overrides = [*smoke_overrides, "method=bapo", "train.steps=5", "checkpoint.every=1",
                 "checkpoint.keep=2", "eval.every=2"]
    reference = tmp_path / "reference"
    done = subprocess.run(_cli(overrides, reference), cwd=REPO, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]

    crashed = tmp_path / "crashed"
    proc = kill_after_checkpoint(overrides, crashed, step=2)
    assert json.loads((crashed / "status.json").read_text())["status"] == "running"
    # The killed process held the run dir's lock; the kernel released it, so the rerun below
    # takes it and resumes (src/lifecycle.py).
    assert (crashed / ".lock").read_text().startswith(f"pid {proc.pid} on host ")
    # The analysis reads the killed run up to its last complete step, and says so.
    from analysis.core.loader import load_runs

    partial = load_runs([crashed])
    (run,) = partial.runs
    assert run.complete_steps == sorted(set(partial.steps["step"]))
    assert partial.steps["step"].max() >= 1 and partial.updates["step"].max() <= partial.steps["step"].max()
    assert any("used up to its last complete step" in m for m in partial.messages)

    resumed = subprocess.run(_cli(overrides, crashed), cwd=REPO, capture_output=True, text=True,
                             timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming" in resumed.stdout
    assert json.loads((crashed / "status.json").read_text())["status"] == "finished"
    a, b = read_metrics(reference), read_metrics(crashed)
    assert [r["step"] for r in b["step"]] == list(range(5))
    assert [(r["step"], r["update"]) for r in b["update"]] == [(s, u) for s in range(5) for u in range(2)]
    assert [r["step"] for r in b["eval"]] == [0, 2, 4, 5]
    for kind in ("update", "step", "eval"):
        assert _strip_times(a[kind]) == _strip_times(b[kind]), kind
    token_parts = sorted(p.name for p in (crashed / "tokens").glob("*.parquet"))
    assert token_parts == [f"step_{s:06d}.parquet" for s in range(5)]
    # keep=2 while it ran; once finished only the final checkpoint is left (keep_final).
    assert sorted(p.name for p in (crashed / "checkpoints").glob("*.pt")) == ["step_000005.pt"]
    # ...and the resumed run whole: every step once, the same numbers as the reference.
    resumed_steps = load_runs([crashed]).steps
    assert resumed_steps["step"].tolist() == list(range(5))


def _nan_on_updates(monkeypatch, is_bad):
    """NaN log-probs from the update forward pass (grad enabled) on calls n where is_bad(n)."""
    real = policy_module.response_logprobs
    calls = {"n": 0}

    def faulty(model, batch, **kw):
        logp, entropy = real(model, batch, **kw)
        if torch.is_grad_enabled():
            calls["n"] += 1
            if is_bad(calls["n"]):
                logp = logp + float("nan")
        return logp, entropy

    monkeypatch.setattr(policy_module, "response_logprobs", faulty)


def test_nan_logprobs_skip_the_update_and_are_counted(tmp_path, smoke_overrides, monkeypatch, capsys):
    _nan_on_updates(monkeypatch, lambda n: n == 2)
    run_dir = tmp_path / "run"
    assert execute(compose([*smoke_overrides, "method=ppo"]), run_dir) == "finished"
    updates = read_metrics(run_dir)["update"]
    skipped = [u for u in updates if u["skipped"]]
    assert [(u["step"], u["update"]) for u in skipped] == [(0, 1)]
    assert "logp" in skipped[0]["skip_reason"]
    steps = read_metrics(run_dir)["step"]
    assert [s["skipped_updates"] for s in steps] == [1, 0, 0]
    assert "step 0 update 1: skipped" in capsys.readouterr().out
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["skipped_updates"] == 1


def test_nan_grad_norm_skips_without_stepping(tmp_path, smoke_overrides, monkeypatch):
    real = torch.nn.utils.clip_grad_norm_
    calls = {"n": 0}

    def nan_once(params, max_norm, *a, **kw):
        calls["n"] += 1
        norm = real(params, max_norm, *a, **kw)
        return torch.tensor(float("nan")) if calls["n"] == 1 else norm

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", nan_once)
    run_dir = tmp_path / "run"
    execute(compose([*smoke_overrides, "method=bapo", "train.steps=1"]), run_dir)
    first, second = read_metrics(run_dir)["update"]
    assert first["skipped"] and first["skip_reason"] == "non-finite grad norm"
    # No optimizer step was taken, so the second mini-batch is still on-policy.
    assert second["policy_lag"] == 0 and second["abs_log_ratio_mean"] == 0.0


def test_consecutive_bad_updates_stop_the_run_and_keep_checkpoint(tmp_path, smoke_overrides,
                                                                  monkeypatch, capsys):
    run_dir = tmp_path / "run"
    cfg = compose([*smoke_overrides, "method=ppo", "train.steps=4", "checkpoint.every=1",
                   "train.max_bad_updates=3"])
    _nan_on_updates(monkeypatch, lambda n: n > 2)  # step 0 (two updates) is fine, then NaN
    with pytest.raises(SystemExit) as stop:
        execute(cfg, run_dir)
    assert stop.value.code == 3
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "failed" and "3 consecutive bad updates" in status["error"]
    assert "numeric fault" in capsys.readouterr().err
    # Step 1's two bad updates left the weights untouched, so its checkpoint is still good;
    # the fault came in step 2, which no checkpoint covers.
    kept = sorted(p.name for p in (run_dir / "checkpoints").glob("*.pt"))
    assert kept == ["step_000001.pt", "step_000002.pt"]
    newest = torch.load(run_dir / "checkpoints" / kept[-1], weights_only=False)
    assert all(torch.isfinite(t).all() for t in newest["model"].values())
    assert newest["state"]["consecutive_bad_updates"] == 2


@pytest.mark.parametrize("method", ["ppo", "clip_higher", "top_entropy", "bapo"])
def test_all_equal_rewards_are_counted_not_divided_by(tmp_path, smoke_overrides, monkeypatch, method):
    from src.tasks.arithmetic import ArithmeticTask

    monkeypatch.setattr(ArithmeticTask, "score", lambda self, problem, response: 1.0)
    run_dir = tmp_path / method
    execute(compose([*smoke_overrides, f"method={method}", "train.steps=1"]), run_dir)
    step = read_metrics(run_dir)["step"][0]
    assert step["degenerate_groups"] == step["num_groups"] == 4
    for update in read_metrics(run_dir)["update"]:
        assert update["loss"] == 0.0 and not update["skipped"]
        assert update["zero_advantage"] is True
        assert math.isfinite(update["grad_norm"]) and update["grad_norm"] == 0.0
        if method == "bapo":
            assert update["bapo_undefined"] is True
            assert (update["c_low"], update["c_high"]) == (0.6, 1.2)


@pytest.mark.slow
def test_config_dir_untouched_outside_run_and_cache(tmp_path, smoke_overrides):
    before = {p for p in REPO.rglob("*") if ".git" not in p.parts}
    execute(compose([*smoke_overrides, "train.steps=1"]), tmp_path / "run")
    after = {p for p in REPO.rglob("*") if ".git" not in p.parts}
    created = {p for p in after - before if "__pycache__" not in p.parts and ".pytest_cache" not in p.parts}
    assert created == set(), sorted(created)[:5]


def test_a_finished_run_that_lost_its_last_line_is_named_then_redone(tmp_path, smoke_overrides,
                                                                     capsys):
    overrides = [*smoke_overrides, "method=ppo", "train.steps=2"]
    run_dir = tmp_path / "run"
    assert execute(compose(overrides), run_dir) == "finished"
    whole = read_metrics(run_dir)
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["kind"] == "eval" and json.loads(lines[-1])["step"] == 2
    (run_dir / "metrics.jsonl").write_text("".join(f"{line}\n" for line in lines[:-1]))
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:  # not skipped as if whole
        execute(compose(overrides), run_dir)
    assert refused.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"config error: hydra.run.dir: {run_dir} is marked finished but its "
                   "metrics.jsonl has no final eval (step 2); pass resume=true to redo the final "
                   "eval from its last checkpoint, or overwrite=true to rerun it")
    assert execute(compose([*overrides, "resume=true"]), run_dir) == "finished"
    redone = read_metrics(run_dir)
    for kind in ("update", "step", "eval"):  # the final checkpoint's weights give the same eval
        assert _strip_times(redone[kind]) == _strip_times(whole[kind]), kind


def test_a_rerun_with_another_method_names_the_method_first(tmp_path):
    import yaml

    from src.config import ConfigError, to_container
    from src.lifecycle import check_existing_run

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(yaml.safe_dump(to_container(compose(["method=bapo"]))))
    (run_dir / "metrics.jsonl").write_text("")
    with pytest.raises(ConfigError) as refused:
        check_existing_run(compose(["method=ppo"]), run_dir)
    assert str(refused.value).startswith(
        f"method.name: {run_dir} holds a run made with another config: method.name is 'ppo' "
        "here but 'bapo' there; method.objective is 'ppo' here but 'bapo' there;"), refused.value
