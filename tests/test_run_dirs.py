"""Runs never collide: overrides get their own run dir, and a dir made with another config
is never skipped or resumed into (exit 2, naming the first differing key)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra import initialize_config_dir

from src import preflight
from src import run as run_module
from src.run_dir import PATH_KEYS, config_differences, run_tag
from src.run_vocab import NON_NUMERIC_KEYS
from tests.conftest import REPO


def job_dirs(args: list[str], multirun: bool = False) -> list[Path]:
    """The run dir of every job `python -m src.run [-m] <args>` would start."""
    preflight.register_resolver()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        jobs = preflight.expand_sweep(args) if multirun else [args]
        return [preflight.job_run_dir(preflight.compose_job(job), multirun) for job in jobs]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["experiment=staleness_4x", "method=bapo", "seed=1"], "runs/staleness_4x/bapo/seed1"),
        ([], "runs/staleness_1x/ppo/seed0"),
        # Keys that change no number leave the path alone.
        (["experiment=smoke", "resume=true", "overwrite=false", "logger.progress=false",
          "logger=wandb", "cache_dir=/tmp/c", "checkpoint.keep_final=false"],
         "runs/smoke/ppo/seed0"),
        (["experiment=smoke", "train.lr=1e-4"], "runs/smoke/ppo/train.lr=1e-4/seed0"),
        # Sorted, so the order on the command line does not matter.
        (["train.steps=5", "experiment=smoke", "train.lr=1e-4"],
         "runs/smoke/ppo/train.lr=1e-4,train.steps=5/seed0"),
        (["method=bapo", "method.bapo.rho0=0.3", "model.architecture.hidden_size=128"],
         "runs/staleness_1x/bapo/method.bapo.rho0=0.3,model.architecture.hidden_size=128/seed0"),
        (["+train.new_key=7"], "runs/staleness_1x/ppo/+train.new_key=7/seed0"),
    ],
)
def test_run_dir_names_the_overrides_that_change_numbers(args, expected):
    assert job_dirs(args) == [Path(expected)]


def test_long_or_unsafe_tags_fall_back_to_a_stable_hash():
    long = ",".join(f"train.key{i}={i}" for i in range(20))
    assert len(long) > 80
    tag = run_tag(long)
    assert tag.startswith("overrides-") and tag.endswith("/") and len(tag) == len("overrides-") + 13
    assert run_tag(long) == tag and run_tag(long + ",x=1") != tag
    assert run_tag("task.params.train_source=/data/gsm8k/train.jsonl").startswith("overrides-")
    assert run_tag("train.betas=[0.9,0.95]").startswith("overrides-")
    assert run_tag("train.lr=1e-4") == "train.lr=1e-4/" and run_tag("") == ""
    (hashed,) = job_dirs(["task=gsm8k", "task.params.train_source=/data/x.jsonl"])
    assert hashed.parent.name.startswith("overrides-") and hashed.name == "seed0"


def test_hydra_exclude_keys_are_the_non_numeric_keys():
    from hydra import compose

    import src.config  # noqa: F401 - registers the defaults, Hydra's exclude_keys with them

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        conf = compose(config_name="config", return_hydra_config=True)
    excluded = list(conf.hydra.job.config.override_dirname.exclude_keys)
    # `logger` is the group choice: local and wandb differ only in non-numeric keys.
    assert sorted(excluded) == sorted([*PATH_KEYS, "logger", *NON_NUMERIC_KEYS])


def test_multirun_jobs_get_their_own_dirs():
    dirs = job_dirs(["experiment=smoke", "method=bapo", "method.bapo.rho0=0.3,0.5", "seed=0,1"],
                    multirun=True)
    assert [d.as_posix() for d in dirs] == [
        f"runs/smoke/bapo/method.bapo.rho0={r}/seed{s}" for r in ("0.3", "0.5") for s in (0, 1)
    ]
    # The paper grid keeps its paths in a sweep too.
    grid = job_dirs(["method=ppo,bapo", "experiment=staleness_1x,staleness_4x", "seed=0"],
                    multirun=True)
    assert {d.as_posix() for d in grid} == {
        f"runs/{e}/{m}/seed0" for m in ("ppo", "bapo") for e in ("staleness_1x", "staleness_4x")
    }


def test_config_differences_ignore_only_non_numeric_keys():
    stored = {"train": {"lr": 5e-5, "steps": 3}, "resume": "auto", "logger": {"progress": True},
              "checkpoint": {"keep": 2}, "rollout": {"params": {}}}
    same = {"train": {"lr": 5e-5, "steps": 3}, "resume": "true", "logger": {"progress": False},
            "checkpoint": {"keep": 5, "keep_final": False}, "rollout": {"params": {}}}
    assert config_differences(stored, same) == []
    other = {**same, "train": {"lr": 1e-4, "steps": 3, "staleness_mode": "sync"},
             "rollout": {"params": {"x": 1}}}
    assert config_differences(stored, other) == [
        ("rollout.params", {}, "<absent>"),
        ("rollout.params.x", "<absent>", 1),
        ("train.lr", 5e-5, 1e-4),
        ("train.staleness_mode", "<absent>", "sync"),
    ]


def _main(argv, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["src.run", *argv])
    with pytest.raises(SystemExit) as done:
        run_module.main()
    return done.value.code


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, smoke_overrides):
    """One finished smoke run, made through the CLI entry point."""
    run_dir = tmp_path_factory.mktemp("collide") / "run"
    args = [*smoke_overrides, "method=ppo", "train.steps=1", f"hydra.run.dir={run_dir}"]
    proc = subprocess.run([sys.executable, "-m", "src.run", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return run_dir, args


def _snapshot(run_dir: Path) -> dict[str, bytes]:
    """Every file but `.lock`, which names the last process that held the dir (even a skip)."""
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*"))
            if p.is_file() and p.name != ".lock"}


@pytest.mark.slow
@pytest.mark.parametrize("status", ["finished", "running"])
def test_a_dir_made_with_another_config_is_refused(finished_run, status, tmp_path, monkeypatch,
                                                   capsys):
    source, args = finished_run
    run_dir = tmp_path / "run"
    subprocess.run(["cp", "-r", str(source), str(run_dir)], check=True)
    if status == "running":  # an unfinished run: it would be resumed, not skipped
        record = json.loads((run_dir / "status.json").read_text())
        (run_dir / "status.json").write_text(json.dumps({**record, "status": "running"}))
    before = _snapshot(run_dir)
    argv = [a for a in args if not a.startswith("hydra.run.dir")] + [f"hydra.run.dir={run_dir}"]
    assert _main([*argv, "train.lr=1e-4", "train.steps=2"], monkeypatch) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"config error: train.lr: {run_dir} holds a run made with another config")
    old_lr = yaml.safe_load((run_dir / "config.yaml").read_text())["train"]["lr"]
    assert f"train.lr is 0.0001 here but {old_lr} there; train.steps is 2 here but 1 there" in err
    assert "overwrite=true" in err
    assert _snapshot(run_dir) == before


@pytest.mark.slow
def test_a_key_the_old_run_did_not_have_is_a_difference(finished_run, tmp_path, monkeypatch,
                                                        capsys):
    source, args = finished_run
    run_dir = tmp_path / "run"
    subprocess.run(["cp", "-r", str(source), str(run_dir)], check=True)
    stored = yaml.safe_load((run_dir / "config.yaml").read_text())
    del stored["train"]["epochs"]  # as if made before the key existed
    (run_dir / "config.yaml").write_text(yaml.safe_dump(stored))
    argv = [a for a in args if not a.startswith("hydra.run.dir")] + [f"hydra.run.dir={run_dir}"]
    assert _main(argv, monkeypatch) == 2
    assert "train.epochs is 1 here but not set there" in capsys.readouterr().err


@pytest.mark.slow
def test_display_settings_still_skip_the_finished_run(finished_run, monkeypatch, capsys):
    run_dir, args = finished_run
    before = _snapshot(run_dir)
    monkeypatch.setattr(sys, "argv", ["src.run", *args, "logger.progress=true", "resume=true",
                                      "checkpoint.keep=4"])
    run_module.main()
    out = capsys.readouterr().out
    assert "already finished; skipping" in out
    assert _snapshot(run_dir) == before


@pytest.mark.parametrize(
    ("sweep", "names"),
    [
        (["method=ppo,bapo", "method.bapo.rho0=1.5"], "method.bapo.rho0: not a key of method=ppo"),
        (["method=bapo", "method.bapo.rho0=0.4,1.5"],
         "method.bapo.rho0 must be in (0, 1), got 1.5 (multirun job 2 of 2"),
        (["method=ppo", "logger.progress=true,false"], "would both write"),
        (["method=ppo,nope"], "method: unknown option 'nope'"),
    ],
)
@pytest.mark.slow
def test_multirun_checks_every_job_before_any_runs(sweep, names, tmp_path):
    sweep_dir = tmp_path / "sweep"
    proc = subprocess.run(
        [sys.executable, "-m", "src.run", "-m", "experiment=smoke", *sweep,
         f"hydra.sweep.dir={sweep_dir}", f"cache_dir={tmp_path / 'cache'}"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    # smoke's eval.every=2 and train.steps=3 add preflight's eval-spacing warning; the error
    # must be the one other line
    lines = [ln for ln in proc.stderr.strip().splitlines() if not ln.startswith("warning: ")]
    err = "\n".join(lines)
    assert len(lines) == 1 and err.startswith("config error: "), proc.stderr
    assert names in err
    assert not sweep_dir.exists() and not (tmp_path / "cache").exists()
