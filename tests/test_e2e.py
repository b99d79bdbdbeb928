"""End to end on CPU: every method runs the smoke experiment and leaves a complete run dir."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from src.algorithms import CLIP_STATES
from src.algorithms import METHODS as REGISTERED
from src.run import execute
from src.telemetry import TOKEN_SCHEMA
from tests.conftest import REPO, compose

METHODS = sorted(REGISTERED)  # every registered method runs the smoke experiment
UPDATE_KEYS = {"step", "update", "global_update", "policy_lag", "loss", "grad_norm", "kl_k3",
               "c_low", "c_high", "rho_before", "rho", "bapo_steps", "clip_frac", "clip_low_frac",
               "clip_high_frac", "dual_clip_frac", "clip_frac_pos", "clip_frac_neg", "tokens_pos",
               "tokens_neg", "tokens_zero", "tokens_in_loss", "token_share_pos", "contrib_grad_pos",
               "contrib_grad_neg", "contrib_grad_pos_share", "contrib_value_pos",
               "contrib_value_neg", "contrib_value_pos_share", "entropy_mean", "entropy_clip_cov",
               "ratio_mean", "abs_log_ratio_mean", "skipped", "time_update_s"}
STEP_KEYS = {"step", "reward_mean", "accuracy", "degenerate_groups", "num_groups",
             "response_length_mean", "response_length_pos", "response_length_neg", "entropy_mean",
             "clip_frac", "c_low", "c_high", "rho", "grad_norm", "sampler_logp_gap",
             "time_rollout_s", "time_behavior_s", "time_update_s", "time_telemetry_s",
             "time_step_s"}


def read_metrics(run_dir):
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {kind: [r for r in records if r["kind"] == kind] for kind in ("update", "step", "eval")}


def run_smoke(tmp_path, overrides, name):
    run_dir = tmp_path / name
    assert execute(compose(overrides), run_dir) == "finished"
    return run_dir


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory, smoke_overrides):
    base = tmp_path_factory.mktemp("smoke")
    return {m: run_smoke(base, [*smoke_overrides, f"method={m}"], m) for m in METHODS}


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
def test_smoke_run_dir_is_complete(smoke_runs, method):
    run_dir = smoke_runs[method]
    for name in ("config.yaml", "meta.json", "status.json", "metrics.jsonl"):
        assert (run_dir / name).is_file(), name
    assert json.loads((run_dir / "status.json").read_text())["status"] == "finished"
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["method"] == method and meta["wall_time_s"] > 0
    metrics = read_metrics(run_dir)
    steps = [r["step"] for r in metrics["step"]]
    assert steps == [0, 1, 2]
    assert len(metrics["update"]) == 3 * 2  # staleness 2 in the smoke experiment
    assert [r["step"] for r in metrics["eval"]] == [0, 2, 3]
    for record in metrics["update"]:
        assert record.keys() >= UPDATE_KEYS, UPDATE_KEYS - record.keys()
        assert record["skipped"] is False
        assert all(not (isinstance(v, float) and math.isnan(v)) for v in record.values())
    for record in metrics["step"]:
        assert record.keys() >= STEP_KEYS, STEP_KEYS - record.keys()
    parts = sorted((run_dir / "tokens").glob("step_*.parquet"))
    assert [p.name for p in parts] == [f"step_{s:06d}.parquet" for s in range(3)]
    # checkpoint.every=2 kept steps 2 and 3 while running; finished, only the last is left.
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step_000003.pt"]
    tokens = pd.concat(pq.read_table(p).to_pandas() for p in parts)
    assert list(tokens.columns) == TOKEN_SCHEMA.names
    # NaN only as the bounds of a method that has none
    bounded = metrics["update"][0]["c_low"] is not None
    # NaN only where a quantity does not exist: bounds of a method without any, and the IS
    # weight of a run without a mismatch correction (this one), whose rejection keeps all
    assert not tokens.select_dtypes("number").drop(columns=["c_low", "c_high", "is_weight"]).isna().any().any()
    assert tokens["is_weight"].isna().all() and tokens["rs_keep"].all()
    assert tokens[["c_low", "c_high"]].isna().all().all() != bounded
    assert set(tokens["clip_state"]) <= set(CLIP_STATES)
    # every response token of every update is logged once (token_fraction = 1)
    per_update = tokens.groupby(["step", "update"]).size()
    in_loss = pd.DataFrame(metrics["update"]).set_index(["step", "update"])
    kept = tokens.groupby(["step", "update"])["in_loss"].sum()
    assert (kept == in_loss["tokens_in_loss"]).all()
    if method == "top_entropy":  # the one method that leaves tokens out of the loss
        assert (kept < per_update).all()
    else:
        assert (per_update == in_loss["tokens_in_loss"]).all()


@pytest.mark.slow
def test_bapo_logs_bounds_from_its_grid(smoke_runs):
    updates = read_metrics(smoke_runs["bapo"])["update"]
    for u in updates:
        assert 0.6 - 1e-9 <= u["c_low"] <= 0.9 + 1e-9 and 1.2 - 1e-9 <= u["c_high"] <= 3.0 + 1e-9
        steps_high = round((u["c_high"] - 1.2) / 0.05)
        assert math.isclose(u["c_high"], 1.2 + steps_high * 0.05, abs_tol=1e-9)


@pytest.mark.slow
def test_same_seed_same_metrics(tmp_path, smoke_overrides):
    runs = [run_smoke(tmp_path, [*smoke_overrides, "method=bapo"], f"r{i}") for i in range(2)]
    a, b = (read_metrics(r) for r in runs)

    def strip(records):
        return [{k: v for k, v in r.items() if not k.startswith("time_")} for r in records]

    for kind in ("update", "step", "eval"):
        assert strip(a[kind]) == strip(b[kind])


def test_staleness_1x_first_update_is_on_policy(tmp_path, smoke_overrides):
    run_dir = run_smoke(tmp_path, [*smoke_overrides, "train.staleness=1"], "one")
    tokens = pd.concat(pq.read_table(p).to_pandas() for p in (run_dir / "tokens").glob("*.parquet"))
    assert (tokens["update"] == 0).all()
    assert (tokens["ratio"] == 1.0).all()
    assert (tokens["clip_state"] == "none").all()


def test_staleness_4x_drift_grows_with_update_index(tmp_path, smoke_overrides):
    # Per mini-batch the drift is noisy (which tokens, which signs); over several rollouts
    # the growth with the update index is what staleness means.
    run_dir = run_smoke(tmp_path, [*smoke_overrides, "train.staleness=4", "train.steps=6",
                                   "train.prompts_per_step=8", "eval.every=100"], "four")
    updates = pd.DataFrame(read_metrics(run_dir)["update"])
    drift = updates.groupby("update")["abs_log_ratio_mean"].mean()
    assert drift.loc[0] == 0.0
    # Three updates of lag against one: clearly more. Neighbours (lag 2 vs 3) are within
    # the noise of 6 rollouts and came out either way on different CPUs.
    assert drift.loc[3] > drift.loc[1] > 0 and drift.loc[2] > drift.loc[1]
    slope = np.polyfit(drift.index.to_numpy(float), drift.to_numpy(), 1)[0]
    assert slope > 0


@pytest.mark.slow
def test_cli_runs_and_skips_finished(tmp_path, smoke_overrides):
    run_dir = tmp_path / "cli"
    cmd = [sys.executable, "-m", "src.run", *smoke_overrides, "method=ppo", "train.steps=1",
           f"hydra.run.dir={run_dir}"]
    first = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    assert json.loads((run_dir / "status.json").read_text())["status"] == "finished"
    # The run ends with one summary block, every number read back from its run dir.
    metrics = read_metrics(run_dir)
    (start, end), (step,) = metrics["eval"], metrics["step"]
    meta = json.loads((run_dir / "meta.json").read_text())
    wall = meta["wall_time_s"]
    assert meta["omp_wait"]["reason"]  # which wait policy it ran with, and why

    def row(name):
        a, b = start[f"{name}_accuracy"], end[f"{name}_accuracy"]
        return f"    {name:<8} start {a:.3f}  end {b:.3f}  change {b - a:+.3f}"

    block = [
        f"finished: {run_dir}",
        "  experiment=smoke is a smoke run: it checks that the pipeline runs end to end; its "
        "numbers are not results",
        "  held-out accuracy, 8 problems, 4 samples per problem: step 0 -> step 1",
        row("greedy"),
        row("sampled"),
        "  one seed: seeds differ more than methods often do, so "
        "compare methods over seeds, paired by seed (docs/statistics.md)",
        f"  final reward: {step['reward_mean']:.3f} (the training rollouts' mean reward, "
        "averaged over the last step)",
        f"  training wall time: {wall:.1f} s",
        f"  next: python analysis/make_figures.py --runs {run_dir}",
    ]
    out = first.stdout.splitlines()
    assert out[-len(block):] == block, first.stdout[-2000:]
    again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "already finished; skipping" in again.stdout
    assert again.stdout.splitlines()[-len(block):] == block


def test_keep_final_false_leaves_no_checkpoint(tmp_path, smoke_overrides):
    run_dir = run_smoke(tmp_path, [*smoke_overrides, "checkpoint.keep_final=false"], "none")
    assert not (run_dir / "checkpoints").exists()
    assert json.loads((run_dir / "status.json").read_text())["status"] == "finished"
    # Skipping it again needs nothing more than its logs.
    assert execute(compose([*smoke_overrides, "checkpoint.keep_final=false"]), run_dir) == "skipped"


def test_wandb_logger_stays_offline(tmp_path, smoke_overrides, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    run_dir = run_smoke(tmp_path, [*smoke_overrides, "logger=wandb", "train.steps=1"], "wb")
    offline = list((run_dir / "wandb").glob("offline-run-*"))
    assert offline, "wandb should have written an offline run inside the run dir"


@pytest.mark.slow
def test_multirun_sweeps_methods_into_their_run_dirs(tmp_path, smoke_overrides):
    cmd = [sys.executable, "-m", "src.run", "-m", *smoke_overrides, "method=ppo,top_entropy",
           "train.steps=1", f"hydra.sweep.dir={tmp_path}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for method in ("ppo", "top_entropy"):
        # The tiny-model overrides change the numbers, so they name a dir level of their
        # own: too long to spell out, so a hash, with the overrides listed in meta.json.
        (run_dir,) = (tmp_path / "smoke" / method).glob("overrides-*/seed0")
        status = json.loads((run_dir / "status.json").read_text())
        assert status["status"] == "finished"
        meta = json.loads((run_dir / "meta.json").read_text())
        assert f"method={method}" in meta["overrides"] and "train.steps=1" in meta["overrides"]


def test_tiny_model_yaml_mirrors_code_defaults():
    import yaml

    from src.warm_start import DEFAULT_MODEL_CFG, DEFAULT_SFT_CFG

    conf = yaml.safe_load((REPO / "conf" / "model" / "tiny.yaml").read_text())
    assert conf["architecture"] == DEFAULT_MODEL_CFG
    assert conf["sft"] == DEFAULT_SFT_CFG
