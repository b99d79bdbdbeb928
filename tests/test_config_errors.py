"""Bad configs fail before any work: exit code 2, one line naming the key, no run dir."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch

from src import run as run_module
from src.config_fields import ConfigError
from tests.conftest import REPO, compose

BAD_CONFIGS = [
    (["train.staleness=0"], "train.staleness"),
    (["train.staleness=-2"], "train.staleness"),
    (["train.staleness=3"], "train.staleness"),  # 16 x 8 = 128 responses, 3 does not divide
    (["train.staleness=32"], "train.staleness"),  # 128 / 32 = 4 responses, half a group of 8
    (["eval.greedy=false", "eval.sampled=false"], "eval.greedy"),  # a run that evaluates nothing
    (["method=bapo", "method.bapo.rho0=1.5"], "method.bapo.rho0"),
    (["method=bapo", "method.bapo.rho0=0"], "method.bapo.rho0"),
    (["method.ppo.c_low=1.3", "method.ppo.c_high=1.2"], "method.ppo.c_low"),
    (["method.c_low=0.7"], "method.ppo.c_low"),  # the old flat layout: named where it moved
    (["method=bapo", "method.bapo.low_max=1.3"], "method.bapo.low_max"),
    (["method=bapo", "method.bapo.high_start=3.5"], "method.bapo.high_start"),
    (["train.steps=0"], "train.steps"),
    (["train.steps=-5"], "train.steps"),
    (["method=top_entropy", "method.top_entropy.q=0"], "method.top_entropy.q"),
    (["method=top_entropy", "method.top_entropy.q=1.5"], "method.top_entropy.q"),
    (["method=top_entropy", "method.top_entropy.scope=batch"], "method.top_entropy.scope"),
    (["method=bapo", "method.bapo.dual_clip_c=0.5"], "method.bapo.dual_clip_c"),
    (["method=ppo", "method.aggregation=mean"], "method.aggregation"),
    (["method=ppo", "method.objective=bapo"], "method.ppo"),  # ppo's section, bapo's objective
    (["method=nonexistent"], "method"),
    (["task=nonexistent"], "task"),
    (["model=nonexistent"], "model"),
    (["task.name=nonexistent"], "task.name"),
    (["method.objective=nonexistent"], "method.objective"),
    (["model.kind=hf", "model.path=/no/such/model/dir"], "model.path"),
    (["model.kind=hf"], "model.path"),
    (["train.group_size=1"], "train.group_size"),
    (["train.lr=0"], "train.lr"),
    (["train.staleness=abc"], "train.staleness"),
    (["method=bapo", "method.bapo.contribution=magic"], "method.bapo.contribution"),
    (["logger.token_fraction=0"], "logger.token_fraction"),
    (["rollout.temperature=0"], "rollout.temperature"),
    (["model.sft.stepz=3"], "model.sft"),
    (["task.params.max_terms=1"], "task.params.max_terms"),
    (["task.params.min_terms=1"], "task.params.min_terms"),
    (["task.params.nonsense=1"], "task.params"),
    (["method.bapo.rho0=0.3"], "method.bapo.rho0"),  # a bapo key under the default ppo
    (["resume=maybe"], "resume"),
    (["device=cuda:abc"], "device"),
    (["device=cuda:-1"], "device"),
    (["train.weight_decay=-1"], "train.weight_decay"),
    (["train.lr=inf"], "train.lr"),
    (["model.architecture.num_heads=3"], "model.architecture.num_heads"),  # 256 wide
    (["rollout.max_new_tokens=500"], "rollout.max_new_tokens"),  # 128 positions
    # a cap at or below 1 would cut every token the policy has moved toward (AReaL refuses it)
    (["offpolicy.anchor=decoupled", "offpolicy.weight_cap=0.5"], "offpolicy.weight_cap"),
    (["offpolicy.anchor=decoupled", "offpolicy.weight_rule=truncate"], "offpolicy.weight_rule"),
    # the mismatch features (src/corrections/, src/rollout/sampler_precision.py)
    (["rollout.temperature=-0.7"], "rollout.temperature"),
    (["eval.temperature=0"], "eval.temperature"),
    (["rollout.precision=fp8"], "rollout.precision"),
    (["correction.rollout_is=token", "correction.rollout_is_threshold=0"], "correction.rollout_is_threshold"),
    (["correction.rollout_is=token", "correction.rollout_is_threshold=-2"], "correction.rollout_is_threshold"),
    (["correction.rollout_is=token", "correction.rollout_is_threshold=2.0_1.0"], "correction.rollout_is_threshold"),
    (["correction.rollout_is=token", "correction.rollout_is_threshold=0.5_2"], "correction.rollout_is_threshold"),
    (["correction.rollout_is=tokens"], "correction.rollout_is"),
    (["correction.rollout_rs=token_k4", "correction.rollout_rs_threshold=0.1"], "correction.rollout_rs"),
    (["correction.rollout_rs=seq_max_k1", "correction.rollout_rs_threshold=2.0"], "correction.rollout_rs"),
    (["correction.rollout_rs=token_k3"], "correction.rollout_rs_threshold"),
    (["correction.rollout_rs=token_k1", "correction.rollout_rs_threshold=0.9"], "correction.rollout_rs_threshold"),
    (["correction.rollout_rs='token_k2,token_k3'", "correction.rollout_rs_threshold='0.1,0.2,0.3'"],
     "correction.rollout_rs_threshold"),
    (["correction.rollout_rs_threshold=0.1"], "correction.rollout_rs_threshold"),
    (["correction.bypass_mode=true", "correction.rollout_is=token"], "correction.rollout_is"),
    (["correction.bypass_mode=true", "offpolicy.source=delay", "offpolicy.delay=2",
      "offpolicy.anchor=decoupled"], "correction.bypass_mode"),
    (["correction=nonexistent"], "correction"),
    # the 2025-26 clip family: temperatures, thresholds and budgets > 0, betas >= 0, bounds in order
    (["method=sapo", "method.sapo.tau_pos=0"], "method.sapo.tau_pos"),
    (["method=sapo", "method.sapo.tau_neg=-1.05"], "method.sapo.tau_neg"),
    (["method=dppo_tv", "method.dppo_tv.delta_high=0"], "method.dppo_tv.delta_high"),
    (["method=dppo_kl", "method.dppo_kl.delta_low=-0.05"], "method.dppo_kl.delta_low"),
    (["method=gppo", "method.gppo.beta1=-0.25"], "method.gppo.beta1"),
    (["method=ce_gppo", "method.gppo.c_low=1.5"], "method.gppo.c_low"),
    (["method=dcpo", "method.dcpo.eps_high=0"], "method.dcpo.eps_high"),
    (["method=aspo", "method.aspo.c_low_high_entropy=1.5"], "method.aspo.c_low_high_entropy"),
]


@pytest.mark.parametrize(("overrides", "key"), BAD_CONFIGS, ids=lambda v: str(v))
def test_bad_config_exits_2_naming_key(overrides, key, tmp_path, monkeypatch, capsys):
    proc = _main(overrides, tmp_path, monkeypatch, capsys)
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("config error: "), err
    assert key in err, f"message does not name {key}: {err}"


def test_cli_process_exit_code(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "src.run", "method=bapo", "method.bapo.rho0=2",
         f"hydra.run.dir={run_dir}"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "config error: method.bapo.rho0 must be in (0, 1), got 2.0"
    assert not run_dir.exists()


def _cli(args, tmp_path, env=None):
    """`python -m src.run` in a new process, for what must start in one: the dataset tests'
    hub settings (HF_HUB_OFFLINE) are read when huggingface_hub is imported."""
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "src.run", *args, f"hydra.run.dir={run_dir}",
                           f"cache_dir={tmp_path / 'cache'}"], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env=env)
    assert not run_dir.exists() and not (tmp_path / "cache").exists()
    return proc


@dataclass(frozen=True)
class Exited:
    returncode: int
    stderr: str


def _main(args, tmp_path, monkeypatch, capsys) -> Exited:
    """`src.run`'s main in this process, as `_cli` runs it in a new one: a config error exits
    before any work, so the process boundary adds only torch's import (2-4 s a call);
    `test_cli_process_exit_code` checks that boundary once."""
    run_dir = tmp_path / "run"
    monkeypatch.setattr(sys, "argv", ["src.run", *args, f"hydra.run.dir={run_dir}",
                                      f"cache_dir={tmp_path / 'cache'}"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        run_module.main()
    assert not run_dir.exists() and not (tmp_path / "cache").exists()
    return Exited(exit_info.value.code, capsys.readouterr().err)


@pytest.mark.slow
def test_a_key_of_another_method_names_the_methods_that_own_it(tmp_path, monkeypatch, capsys):
    proc = _main(["method.bapo.rho0=0.3"], tmp_path, monkeypatch, capsys)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "config error: method.bapo.rho0: not a key of method=ppo; it belongs to method=bapo "
        "(also bapo_official, bapo_value); select it with method=bapo")
    proc = _main(["method=bapo", "method.top_entropy.q=0.3"], tmp_path, monkeypatch, capsys)
    assert proc.stderr.strip() == (
        "config error: method.top_entropy.q: not a key of method=bapo; it belongs to "
        "method=top_entropy; select it with method=top_entropy")
    proc = _main(["method=bapo", "method.rho0=0.3"], tmp_path, monkeypatch, capsys)
    assert proc.stderr.strip() == (
        "config error: method.rho0: the method's parameters live under method.<objective>; "
        "use method.bapo.rho0")
    proc = _main(["method=bapo", "method.bapo.rho00=0.3"], tmp_path, monkeypatch, capsys)
    assert proc.stderr.strip().endswith("method.bapo.rho00: no such key; check the spelling "
                                        "(`--cfg job` lists every key)")


def test_resume_true_as_the_readme_writes_it():
    assert compose(["resume=true"]).resume == "true"
    assert compose(["resume=false"]).resume == "false"
    assert compose([]).resume == "auto"


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_gpu_is_a_config_error(tmp_path, monkeypatch, capsys):
    proc = _main(["device=cuda"], tmp_path, monkeypatch, capsys)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("config error: device=cuda: torch ")
    assert "sees no CUDA device on this machine; use device=cpu" in proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_vllm_without_the_package_is_a_config_error(tmp_path, monkeypatch, capsys):
    proc = _main(["rollout=vllm"], tmp_path, monkeypatch, capsys)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("config error: rollout.backend=vllm needs the vllm")


@pytest.mark.slow
def test_dataset_task_without_data_says_where_to_put_it(tmp_path):
    # Offline: the hub answers at once instead of after its retries.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    proc = _cli(["task=gsm8k", "task.params.scorer=simple"], tmp_path, env)
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("config error: task.params.train_source='openai/gsm8k'"), err
    assert err.endswith("e.g. data/gsm8k/train.jsonl, and set "
                        "task.params.train_source=data/gsm8k/train.jsonl"), err
    missing = tmp_path / "nope.jsonl"
    proc = _cli(["task=math500", f"task.params.train_source={missing}",
                 "task.params.scorer=simple"], tmp_path, env)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith(
        f"config error: task.params.train_source={str(missing)!r}: no such file; without a "
        "network, put the train split in a local .jsonl/.json/.parquet file (rows with fields "
        "problem, answer, solution)")


@pytest.mark.slow
def test_hf_model_from_a_dir_as_the_readme_writes_it(tmp_path, smoke_overrides):
    """`model.kind=hf model.path=<dir>`: here the dir is a warm start saved by HF."""
    from src.run import execute
    from tests.test_e2e import read_metrics

    tiny = tmp_path / "tiny"
    assert execute(compose([*smoke_overrides, "train.steps=1"]), tiny) == "finished"
    saved = json.loads((tiny / "meta.json").read_text())["warm_start"]
    cfg = compose([*smoke_overrides, "model.kind=hf", f"model.path={saved}", "train.steps=1"])
    assert cfg.model.kind == "hf" and cfg.model.path == saved
    assert execute(cfg, tmp_path / "hf") == "finished"
    metrics = read_metrics(tmp_path / "hf")
    assert [r["step"] for r in metrics["step"]] == [0]
    assert [r["step"] for r in metrics["eval"]] == [0, 1]
    # The HF-loaded copy of the warm start scores what the warm start itself scores before
    # training (same weights, same held-out problems, same eval seed).
    assert metrics["eval"][0] == read_metrics(tiny)["eval"][0]


def test_unusable_paths_are_config_errors(tmp_path, monkeypatch, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("not a dir")
    cases = [
        ([f"cache_dir={a_file / 'cache'}"], f"config error: cache_dir={a_file / 'cache'}: {a_file} is a file"),
        ([f"hydra.run.dir={a_file}"], f"config error: hydra.run.dir={a_file} is a file, not a dir"),
        # /proc takes no new dirs, whoever asks (permissions alone do not tell for root)
        (["hydra.run.dir=/proc/no-run-here"], "config error: hydra.run.dir=/proc/no-run-here: cannot write in /proc"),
        (["cache_dir=/proc/no-cache-here"], "config error: cache_dir=/proc/no-cache-here: cannot write in /proc"),
    ]
    for overrides, start in cases:
        default_dirs = [f"hydra.run.dir={tmp_path / 'run'}", f"cache_dir={tmp_path / 'cache'}"]
        given = {o.split("=")[0] for o in overrides}
        argv = ["src.run", *[d for d in default_dirs if d.split("=")[0] not in given], *overrides]
        monkeypatch.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit) as exit_info:
            run_module.main()
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith(start), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]  # nothing made, no probe left


@pytest.mark.slow
def test_a_parameter_under_another_methods_section_names_its_owner(tmp_path, monkeypatch, capsys):
    proc = _main(["method.ppo.rho0=0.4"], tmp_path, monkeypatch, capsys)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "config error: method.ppo.rho0: method=ppo has no parameter rho0; rho0 belongs to "
        "method=bapo (also bapo_official, bapo_value): use method=bapo method.bapo.rho0=...")
    proc = _main(["method=bapo", "method.ppo.c_low=0.7"], tmp_path, monkeypatch, capsys)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "config error: method.ppo.c_low: method=bapo has no c_low; its counterpart is "
        "method.bapo.low_start (or select method=ppo to set method.ppo.c_low)")
    proc = _main(["method=bapo", "method.ppo.dual_clip_c=3"], tmp_path, monkeypatch, capsys)
    assert proc.stderr.strip() == (
        "config error: method.ppo.dual_clip_c: method=bapo's parameters live under method.bapo; "
        "use method.bapo.dual_clip_c")


@pytest.mark.slow
def test_help_lists_only_the_groups_src_run_takes():
    proc = subprocess.run([sys.executable, "-m", "src.run", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    groups = [line.split(":")[0] for line in proc.stdout.split("== Configuration groups ==")[1]
              .split("== Config ==")[0].splitlines() if ": " in line]
    # conf/hydra holds options of Hydra's own groups (hydra/launcher), listed by Hydra apart
    expected = sorted(p.name for p in (REPO / "conf").iterdir()
                      if p.is_dir() and p.name not in ("integrations", "hydra"))
    assert groups == expected and "integrations" not in groups


@pytest.mark.slow
def test_cfg_job_warns_when_the_config_would_not_run(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "src.run", "--cfg", "job", "train.lr=inf",
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0
    assert "lr: .inf" in proc.stdout or "lr: inf" in proc.stdout, proc.stdout
    assert proc.stderr.strip() == ("warning: this config would not run: config error: train.lr "
                                   "must be a finite number > 0, got inf")
    fine = subprocess.run([sys.executable, "-m", "src.run", "--cfg", "job"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert fine.returncode == 0 and fine.stderr == ""


def test_a_huge_eval_warns_with_an_estimate(tmp_path, capsys):
    from src.preflight import SECONDS_PER_RESPONSE, check_run

    check_run(["task.eval_problems=1000000", f"hydra.run.dir={tmp_path / 'run'}",
               f"cache_dir={tmp_path / 'cache'}"], multirun=False)
    hours = 1_000_000 * 5 * SECONDS_PER_RESPONSE / 3600  # 1 greedy + 4 sampled per problem
    assert capsys.readouterr().err.strip() == (
        "warning: task.eval_problems=1000000: each of the run's 4 evals generates 5000000 "
        f"responses, about {hours:.1f} h each at the default model size on 2 CPU cores (a "
        "progress bar shows it); the default is 256")
    check_run([f"hydra.run.dir={tmp_path / 'run'}"], multirun=False)
    assert capsys.readouterr().err == ""


def test_evals_off_a_fixed_interval_warn(tmp_path, capsys):
    # ramble_delay_16's 46 steps at eval.every=5: evals at 40, 45 and 46 (finding 10 of #55)
    from src.preflight import check_run

    check_run(["train.steps=46", "eval.every=5", f"hydra.run.dir={tmp_path / 'run'}",
               f"cache_dir={tmp_path / 'cache'}"], multirun=False)
    assert capsys.readouterr().err.strip() == (
        "warning: eval.every=5 does not divide train.steps=46: the last eval (step 46) falls 1 "
        "step(s) after the one at step 45, so the final accuracy (the mean of the last three "
        "evals) weighs the run's end twice; make train.steps a multiple of eval.every")
    check_run(["train.steps=45", "eval.every=5", f"hydra.run.dir={tmp_path / 'run'}",
               f"cache_dir={tmp_path / 'cache'}"], multirun=False)
    assert capsys.readouterr().err == ""


def test_ctrl_c_prints_one_line(monkeypatch, capsys):
    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(run_module, "hydra_main", interrupted)
    monkeypatch.setattr(run_module, "preflight", lambda args: None)
    monkeypatch.setattr(sys, "argv", ["src.run"])
    with pytest.raises(SystemExit) as exit_info:
        run_module.main()
    assert exit_info.value.code == 130
    assert capsys.readouterr().err.strip() == (
        "interrupted: run the same command again to resume from the last checkpoint")


def test_a_correction_needs_a_source_with_sampler_logprobs(monkeypatch):
    """A source that keeps no sampler log-probs cannot be corrected: named before any work."""
    from src.config import ConfigError
    from src.schedule import sources

    fresh = sources.SOURCES["fresh"]
    monkeypatch.setitem(sources.SOURCES, "fresh", type("NoSamplerLogprobs", (fresh,),
                                                       {"sampler_logprobs": False}))
    with pytest.raises(ConfigError, match=r"^correction needs the sampler's log-probs"):
        compose(["correction=tis"])
    assert compose(["correction=none"]).correction.rollout_is is None  # no correction: fine


def test_a_precision_the_device_cannot_run_is_a_config_error(monkeypatch):
    """rollout.precision is tried on the device before any work (here: a device whose half
    precision attention fails, as on GPUs without fp16 kernels)."""
    from src.config import ConfigError

    def no_half(*args, **kwargs):
        raise RuntimeError('"scaled_dot_product_attention" not implemented for \'Half\'')

    assert compose(["rollout.precision=fp16"]).rollout.precision == "fp16"  # this CPU runs it
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", no_half)
    with pytest.raises(ConfigError, match=r"^rollout.precision =fp16: torch.float16 does not run on cpu"):
        compose(["rollout.precision=fp16"])


def test_an_update_smaller_than_a_group_is_refused_and_one_group_warned(tmp_path, monkeypatch,
                                                                         capsys):
    # 8 prompts x 4 responses = 32 a rollout (smol_4x's sizes, on the toy model so that the
    # test needs no model package); at 16 updates each holds 2 responses
    sizes = ["experiment=staleness_4x", "train.prompts_per_step=8", "train.group_size=4"]
    proc = _main([*sizes, "train.staleness=16"], tmp_path, monkeypatch, capsys)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "config error: train.staleness=16: each update would train on 2 response(s) (the "
        "rollout's 8x4 split 16 ways), fewer than one prompt group (train.group_size=4); "
        "advantages are centred within a group, so updates this small are often of one sign or "
        "have no gradient at all; use train.staleness<=8 (one group per update at least), raise "
        "train.prompts_per_step, or use train.staleness_mode=fixed_update")
    from src.preflight import check_run

    dirs = [f"hydra.run.dir={tmp_path / 'run'}", f"cache_dir={tmp_path / 'cache'}"]
    # 32 / 8 = 4 responses: one group's worth runs, with a warning before any work
    check_run([*sizes, "train.staleness=8", *dirs], multirun=False)
    assert capsys.readouterr().err.strip() == (
        "warning: train.staleness=8: each update trains on 4 responses, under two prompt "
        "groups' worth (train.group_size=4), so a single group's signs set the direction of "
        "each update; expect noisy updates")
    check_run([*sizes, *dirs], multirun=False)  # 32 / 4 = 8: two groups
    assert capsys.readouterr().err == ""
    # fixed_update: every update holds a whole rollout of 8x4, whatever the staleness
    check_run([*sizes, "train.staleness=16", "train.staleness_mode=fixed_update",
               *dirs], multirun=False)
    assert capsys.readouterr().err == ""


def test_a_timing_run_may_turn_both_evals_off(tmp_path, monkeypatch):
    from src.preflight import ENV_NO_EVAL, check_run

    args = ["eval.greedy=false", "eval.sampled=false", f"hydra.run.dir={tmp_path / 'run'}",
            f"cache_dir={tmp_path / 'cache'}"]
    monkeypatch.setenv(ENV_NO_EVAL, "1")
    check_run(args, multirun=False)  # benchmarks/ time training alone
    monkeypatch.setenv(ENV_NO_EVAL, "0")
    with pytest.raises(ConfigError, match="^eval.greedy=false and eval.sampled=false"):
        check_run(args, multirun=False)


def test_a_run_into_committed_results_is_refused_and_writes_nothing(tmp_path, monkeypatch, capsys):
    cell = REPO / "experiments" / "paper_grid" / "staleness_4x" / "bapo" / "train.threads=1" / "seed0"
    before = sorted(p.name for p in cell.iterdir())
    for extra in (["overwrite=true"], []):  # moving the cell aside, or resuming into it
        monkeypatch.setattr(sys, "argv", ["src.run", "experiment=staleness_4x", "method=bapo",
                                          "train.threads=1", *extra, f"hydra.run.dir='{cell}'",
                                          f"cache_dir={tmp_path / 'cache'}"])
        with pytest.raises(SystemExit) as exit_info:
            run_module.main()
        assert exit_info.value.code == 2
        assert capsys.readouterr().err.strip() == (
            f"config error: hydra.run.dir={cell} lies in committed results (experiments/"
            "paper_grid), which the runner never writes (their numbers must keep rerunning bit "
            "for bit; overwrite=true would move them aside); leave hydra.run.dir out (the run "
            "then goes to runs/staleness_4x/bapo/train.threads=1/seed0), and compare it with "
            "its cell by python experiments/verify_cell.py CELL --compare-dir RUN_DIR")
        assert sorted(p.name for p in cell.iterdir()) == before  # no .lock, nothing moved
    # a new dir under experiments/ is committed ground too, and is not made
    new = REPO / "experiments" / "paper_grid" / "no_such_run"
    with pytest.raises(ConfigError, match="lies in committed results"):
        from src.preflight import check_run

        check_run([f"hydra.run.dir={new}"], multirun=False)
    assert not new.exists()
