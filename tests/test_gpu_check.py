"""benchmarks/gpu_check.sh at smoke size on CPU: the script end to end (no install step),
and its JSON checked against the run dirs it wrote and against FLOPs computed here."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

# the check's stages run whole (smoke-size) runs: the slow tier
pytestmark = pytest.mark.slow

sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_sizing  # noqa: E402

PEAK_TFLOPS = 0.5  # any value: MFU is then computed on CPU too, and checked below
STEP_FIELDS = {"time_rollout_s", "time_behavior_s", "time_update_s", "tokens_per_s",
               "peak_memory_allocated_gib", "mfu_rollout", "mfu_update", "mfu_step",
               "flops_rollout", "flops_behavior", "flops_update", "prompt_tokens"}


@pytest.fixture(scope="module")
def check(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    env = {**os.environ, "OUT_DIR": str(out), "DEVICE": "cpu", "SIZE": "smoke",
           "INSTALL": "no", "PYTHON": sys.executable, "PEAK_TFLOPS": str(PEAK_TFLOPS)}
    proc = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_check.sh")], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, json.loads((out / "gpu_check.json").read_text()), proc.stdout


def _metrics(run_dir: str, kind: str) -> list[dict]:
    lines = (REPO / run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def test_the_script_runs_both_methods_and_says_it_is_a_dry_run(check):
    out, result, stdout = check
    assert result["ok"] is True and result["status"] == "dry run"
    assert list(result["runs"]) == ["ppo", "bapo"]
    assert result["kv_cache_device"] == "cpu" and result["env"]["rollout"] == "hf"
    assert result["peak_bf16_tflops"] == PEAK_TFLOPS
    table = (out / "sizing_table.md").read_text()
    assert table.startswith("CPU DRY RUN") and table in stdout
    assert [line.split("|")[1].strip() for line in table.splitlines()[4:]] == ["ppo", "bapo"]
    for run in result["runs"].values():
        assert run["stopped_early"] is None
        assert [e["step"] for e in run["evals"]] == [0, 2]


@pytest.mark.parametrize("method", ["ppo", "bapo"])
def test_every_step_is_read_from_the_run_dir(check, method):
    _, result, _ = check
    run = result["runs"][method]
    recorded = _metrics(run["run_dir"], "step")
    assert [s["step"] for s in run["steps"]] == [r["step"] for r in recorded] == [0, 1]
    batch = result["batch"]
    assert batch == 4 * 2
    for row, rec in zip(run["steps"], recorded, strict=True):
        assert row.keys() >= STEP_FIELDS
        for key in ("time_rollout_s", "time_behavior_s", "time_update_s", "reward_mean"):
            assert row[key] == rec[key]
        assert row["tokens_per_s"] == pytest.approx(
            rec["response_length_mean"] * batch / rec["time_rollout_s"])
        assert row["peak_memory_allocated_gib"] is None  # no GPU
    s = run["summary"]
    assert s["steps"] == 2
    assert s["reward_mean"] == pytest.approx(sum(r["reward_mean"] for r in recorded) / 2)
    assert s["time_update_s_mean"] == pytest.approx(sum(r["time_update_s"] for r in recorded) / 2)


def test_flops_and_mfu_follow_the_stated_formula(check):
    _, result, _ = check
    m = result["model"]
    # smoke model: 1 layer, hidden 32, MLP 96 (8/3 * 32 rounded up to 16), LM head V x 32
    assert (m["layers"], m["hidden"]) == (1, 32)
    assert m["n_matmul"] == 4 * 32 * 32 + 3 * 32 * 96 + m["vocab"] * 32
    batch = result["batch"]
    row = result["runs"]["ppo"]["steps"][0]
    tokens = row["prompt_tokens"] + row["response_length_mean"] * batch
    seq = tokens / batch
    forward = tokens * (2 * m["n_matmul"] + 4 * 1 * 32 * seq)
    assert row["flops_rollout"] == pytest.approx(forward)
    assert row["flops_behavior"] == pytest.approx(forward)
    assert row["flops_update"] == pytest.approx(3 * forward)
    assert row["mfu_rollout"] == pytest.approx(forward / (row["time_rollout_s"] * PEAK_TFLOPS * 1e12))
    busy = row["time_rollout_s"] + row["time_behavior_s"] + row["time_update_s"]
    assert row["mfu_step"] == pytest.approx(5 * forward / (busy * PEAK_TFLOPS * 1e12))


def test_prompt_tokens_are_counted_as_the_rollout_tokenizes(check):
    _, result, _ = check
    from transformers import PreTrainedTokenizerFast

    from src.tasks import get_task

    cfg_path = REPO / result["runs"]["ppo"]["run_dir"] / "config.yaml"
    import yaml

    cfg = yaml.safe_load(cfg_path.read_text())
    task = get_task("arithmetic", **cfg["task"]["params"])
    tok = PreTrainedTokenizerFast.from_pretrained(
        json.loads((REPO / result["runs"]["ppo"]["run_dir"] / "meta.json").read_text())["warm_start"])
    start = cfg["model"]["sft"]["steps"] * cfg["model"]["sft"]["batch_size"]
    for step, row in enumerate(result["runs"]["ppo"]["steps"]):
        prompts = [task.problem(start + 4 * step + i).prompt for i in range(4)]
        with_bos = sum(len(tok(p)["input_ids"]) for p in prompts)  # BOS added, as the rollout does
        assert row["prompt_tokens"] == with_bos * 2


@pytest.mark.parametrize("name, peak", [
    ("NVIDIA H100 80GB HBM3", 989.4), ("NVIDIA H100 PCIe", 756.0), ("NVIDIA H100 NVL", 835.0),
    ("NVIDIA H200", 989.4), ("NVIDIA H200 NVL", 835.0), ("NVIDIA A100-SXM4-80GB", 312.0),
    ("NVIDIA L40S", 362.1), ("NVIDIA GeForce GTX 1080", None), (None, None)])
def test_peak_lookup(name, peak):
    got, source = gpu_sizing.peak_bf16_tflops(name)
    assert got == peak
    assert ("PEAK_TFLOPS" in source) == (peak is None)
    assert gpu_sizing.peak_bf16_tflops(name, 123.0) == (123.0, "PEAK_TFLOPS override")
    mfu = gpu_sizing.mfu(1e12, 2.0, got)  # 1 TFLOP in 2 s = 0.5 TFLOP/s
    assert mfu is None if peak is None else mfu == pytest.approx(0.5 / peak)


def test_summary_skips_missing_and_non_finite_values():
    steps = [{"reward_mean": 0.5, "c_low": None, "sampler_logp_gap": 1e-3},
             {"reward_mean": 0.25, "c_low": 0.7, "sampler_logp_gap": math.inf}]
    s = gpu_sizing.summarize_steps(steps, [{"step": 0, "greedy_accuracy": 0.4}])
    assert (s["reward_first"], s["reward_last"], s["reward_mean"]) == (0.5, 0.25, 0.375)
    assert s["c_low_mean"] == 0.7 and s["sampler_logp_gap_max"] == 1e-3
    assert s["eval_greedy_accuracy"] == {0: 0.4} and s["tokens_per_s_mean"] is None


def test_a_run_that_would_overrun_its_budget_stops_between_steps(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--out-dir", str(tmp_path),
         "--device", "cpu", "--size", "smoke", "--methods", "ppo", "--steps", "3",
         "--budget-s", "0"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = json.loads((tmp_path / "gpu_check.json").read_text())["runs"]["ppo"]
    assert run["stopped_early"].startswith("stopped before step 1")
    assert [s["step"] for s in run["steps"]] == [0]  # the first step always runs
    assert [e["step"] for e in run["evals"]] == [0, 1]
    status = json.loads((tmp_path / "runs" / "ppo" / "status.json").read_text())
    assert status["status"] == "stopped"


# --- learning before timings (benchmarks/gpu_check_gates.py) ---------------------------

import gpu_check_gates  # noqa: E402


def _gpu_check(tmp_path, *args):
    return subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--out-dir", str(tmp_path),
         "--device", "cpu", "--size", "smoke", "--methods", "ppo", *args],
        capture_output=True, text=True, timeout=600)


def test_a_warm_start_under_the_floor_is_refused_before_any_rl_run(tmp_path):
    """The smoke warm start (8 SFT steps) answers nothing right; with a floor above that the
    check writes why and exits 1, and no run dir, step or timing exists."""
    proc = _gpu_check(tmp_path, "--min-greedy-accuracy", "0.5")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    assert result["status"] == "refused" and result["ok"] is False
    assert result["warm_start"]["greedy_accuracy"] < 0.5
    assert result["warm_start_floor"] == {"greedy_accuracy": 0.5, "finished_fraction": 0.0}
    assert len(result["refused_because"]) == 1 and "greedy accuracy" in result["refused_because"][0]
    assert "runs" not in result and "sizing_table_md" not in result
    assert not (tmp_path / "runs").exists()
    assert "REFUSED" in proc.stdout


@pytest.mark.parametrize("warm, floor, named", [
    ({"greedy_accuracy": 0.3, "finished_fraction": 0.95}, {"greedy_accuracy": 0.1, "finished_fraction": 0.9}, []),
    ({"greedy_accuracy": 0.1, "finished_fraction": 0.9}, {"greedy_accuracy": 0.1, "finished_fraction": 0.9}, []),
    ({"greedy_accuracy": 0.0, "finished_fraction": 0.0}, {"greedy_accuracy": 0.1, "finished_fraction": 0.9},
     ["greedy accuracy", "share of responses"]),
    ({"greedy_accuracy": 0.5, "finished_fraction": math.nan}, {"greedy_accuracy": 0.1, "finished_fraction": 0.9},
     ["share of responses"]),
    ({"greedy_accuracy": None}, {"greedy_accuracy": 0.0, "finished_fraction": 0.0},
     ["greedy accuracy", "share of responses"]),
])
def test_the_gate_names_each_value_under_its_floor(warm, floor, named):
    problems = gpu_check_gates.warm_start_gate(warm, floor)
    assert len(problems) == len(named)
    assert all(n in p for n, p in zip(named, problems, strict=True))


def test_every_size_states_its_floor():
    import gpu_check

    assert set(gpu_check_gates.WARM_START_FLOORS) == set(gpu_check.SIZES)
    assert gpu_check_gates.WARM_START_FLOORS["gpu"]["greedy_accuracy"] > 0
    assert gpu_check_gates.WARM_START_FLOORS["gpu"]["finished_fraction"] > 0


def test_prediction_interval_by_hand():
    # values 1..5: mean 3, sd sqrt(2.5); t(0.975, 4) = 2.776 (the reports' 3-decimal table)
    mean, low, high, n = gpu_check_gates.prediction_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    half = 2.776 * math.sqrt(2.5) * math.sqrt(1.2)
    assert (mean, n) == (3.0, 5)
    assert low == pytest.approx(3 - half, abs=1e-6) and high == pytest.approx(3 + half, abs=1e-6)
    with pytest.raises(ValueError, match="at least 2"):
        gpu_check_gates.prediction_interval([1.0])


def _gain_by_hand(run_dir, metric):
    """Final window (mean of the last three evals after step 0) minus the step-0 eval."""
    evals = _metrics(str(run_dir), "eval")
    start = next(e[metric] for e in evals if e["step"] == 0)
    tail = [e[metric] for e in evals if e["step"] > 0][-3:]
    return sum(tail) / len(tail) - start


def test_a_committed_seed_is_judged_against_its_own_cell_by_hand():
    """Seed 3 of the committed ppo cell as if it were the GPU's run: no config difference
    (the seed, device and threads are ignored) and the interval computed here."""
    cell = gpu_check_gates.TESTBED_CELL / "ppo" / "train.threads=1"
    got = gpu_check_gates.testbed_comparison("ppo", cell / "seed3")
    assert got["config_differs_in"] == [] and got["committed_seeds"] == list(range(8))
    gains = [_gain_by_hand(d, "sampled_accuracy") for d in sorted(cell.glob("seed*"))]
    n, mean = len(gains), sum(gains) / len(gains)
    sd = math.sqrt(sum((g - mean) ** 2 for g in gains) / (n - 1))
    half = 2.365 * sd * math.sqrt(1 + 1 / n)  # t(0.975, 7), 3 decimals as the reports
    s = got["gain_sampled_acc"]
    assert s["run"] == pytest.approx(gains[3], abs=1e-9)
    assert s["committed_mean"] == pytest.approx(mean, abs=1e-9)
    assert (s["prediction_low"], s["prediction_high"]) == pytest.approx((mean - half, mean + half), abs=1e-6)
    assert s["within"] is (mean - half <= gains[3] <= mean + half)
    assert got["verdict"].startswith("within" if s["within"] else "OUTSIDE")


def test_stage_one_reruns_the_committed_cell_and_reports_a_changed_config_beside_it(tmp_path):
    """Stage 1 at smoke length (1 rollout, 8 eval problems): the run is made as src.run makes
    it, and since its config differs from the committed cell it is not judged."""
    proc = _gpu_check(tmp_path, "--testbed", "ppo", "--testbed-override", "train.steps=1",
                      "--testbed-override", "task.eval_problems=8")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    stage = json.loads((tmp_path / "gpu_check.json").read_text())["testbed"]["ppo"]
    assert stage["status"] == "finished"
    differs = stage["comparison"]["config_differs_in"]
    assert [d.split(":")[0] for d in differs] == ["task.eval_problems", "train.steps"]
    assert stage["comparison"]["gain_sampled_acc"]["within"] is None
    assert stage["comparison"]["verdict"].startswith("config differs")
    run_dir = tmp_path / "testbed" / "ppo"
    assert stage["comparison"]["gain_sampled_acc"]["run"] == pytest.approx(
        _gain_by_hand(run_dir, "sampled_accuracy"), abs=1e-9)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert "experiment=ramble_4x" in meta["overrides"]
