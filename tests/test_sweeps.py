"""experiments/sweeps.yaml and run_sweep.py: every sweep names real configs and the issue's grid."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from experiments import run_sweep
from src.config import ConfigError, validate
from src.models.packaged import PACKAGE_PREFIX, is_packaged, package_dir
from src.preflight import check_installed  # importing it loads the registries
from tests.conftest import config_error

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = yaml.safe_load((ROOT / "experiments" / "sweeps.yaml").read_text())
GRIDS = [(name, i, grid) for name in SWEEPS for i, grid in enumerate(run_sweep.sweep_grids(name))]


def cells(name: str, *keys: str) -> set[tuple]:
    """Every job of the sweep (all its parts) as a tuple of `keys`; a job whose grid lacks
    a key gets None there."""
    out = set()
    for grid in run_sweep.sweep_grids(name):
        axes = [grid.get(k, [None]) for k in keys]
        out |= set(itertools.product(*axes))
    return out


def test_sweeps_cover_the_reproduction_grid():
    def grid_cells(name):
        return cells(name, "method", "experiment", "seed")

    seeds = (0, 1, 2)
    # At 1x clip_higher and bapo are ppo's update (every IS weight is 1), so the 1x cell
    # runs ppo and top_entropy only; 2x and 4x run all four.
    stale = {
        (m, f"staleness_{k}x", s)
        for m in ("ppo", "clip_higher", "top_entropy", "bapo")
        for k in (2, 4)
        for s in seeds
    }
    assert grid_cells("main") == stale
    assert grid_cells("main_1x") == {(m, "staleness_1x", s) for m in ("ppo", "top_entropy") for s in seeds}
    assert grid_cells("fig7") == {
        (m, "staleness_4x", s) for m in ("clip_0.8_1.5", "clip_0.5_1.2") for s in seeds
    }
    assert grid_cells("readings") == {
        (m, "staleness_4x", s) for m in ("bapo_value", "bapo_official") for s in seeds
    }
    assert grid_cells("staleness_8x") == {(m, "staleness_8x", s) for m in ("ppo", "bapo") for s in seeds}
    peers = SWEEPS["peers"]["grid"]
    assert peers["method"] == ["ppo", "clip_higher", "bapo", "gspo", "cispo", "m2po", "clip_cov",
                               "kl_cov"]
    assert peers["seed"] == list(seeds)
    assert len(peers["experiment"]) == 1  # one stale setting, whichever the regime is


def test_peers_run_at_a_stale_setting():
    grid = SWEEPS["peers"]["grid"]
    extra = [f"{k}={v[0]}" for k, v in grid.items() if k not in ("method", "seed")]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = validate(compose("config", overrides=["method=ppo", *extra]))
    assert cfg.train.staleness > 1


def test_random_reward_sweep_is_the_issues_cells():
    # 1x ppo (nothing is clipped) as the control; at 4x the clip settings in both staleness
    # modes at the default 30 steps; again at 100 steps in mini-batch mode with its control
    # (a fixed-update run at 100 steps would cost an estimated ~22 min). Every job with coin-flip rewards
    # and the per-update entropy change logged.
    keys = ("method", "experiment", "train.staleness_mode", "seed", "task.reward",
            "logger.entropy_change", "train.steps")
    seeds = (0, 1, 2)
    clip_settings = ("ppo", "clip_0.8_1.5", "clip_0.5_1.2", "clip_higher", "bapo")
    long_seeds = (0, 1, 2, 3, 4)  # 2 more at 100 steps, where 3 left every interval over 0
    control = {("ppo", "staleness_1x", None, s, "random", True, None) for s in seeds}
    control |= {("ppo", "staleness_1x", None, s, "random", True, 100) for s in long_seeds}
    stale = {
        (m, "staleness_4x", mode, s, "random", True, None)
        for m in clip_settings for mode in ("minibatch", "fixed_update") for s in seeds
    }
    stale_long = {(m, "staleness_4x", "minibatch", s, "random", True, 100)
                  for m in clip_settings for s in long_seeds}
    assert cells("random_reward", *keys) == control | stale | stale_long
    assert len(run_sweep.sweep_grids("random_reward")) == 4  # one multirun per part


@pytest.mark.parametrize("name,part,grid", GRIDS, ids=[f"{n}-{i}" for n, i, _ in GRIDS])
def test_every_grid_runs_seed_outermost(name, part, grid):
    # Hydra runs the first key outermost: a sweep stopped part-way has whole seeds.
    assert list(grid)[:3] == ["seed", "method", "experiment"]


def validate_with_or_without_extra(cfg) -> None:
    """validate(cfg) and what its values need installed, also where the model's optional
    package (the `[pretrained]` extra) is not installed, as in CI: every check of the values
    runs, and the refusal of the missing package names the install line."""
    checked = validate(cfg)
    path = cfg.model.get("path") or ""
    if not is_packaged(path) or package_dir(path[len(PACKAGE_PREFIX):]) is not None:
        check_installed(checked)
        return
    with pytest.raises(ConfigError, match=f"not installed; install it with: {cfg.model.install}"):
        check_installed(checked)


@pytest.mark.slow  # every cell of every sweep composed: about 35 s in all
@pytest.mark.parametrize("name,part,grid", GRIDS, ids=[f"{n}-{i}" for n, i, _ in GRIDS])
def test_every_cell_composes_and_validates(name, part, grid):
    keys = [k for k in grid if k != "seed"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        for values in itertools.product(*(grid[k] for k in keys)):
            overrides = run_sweep.grid_overrides({k: [v] for k, v in zip(keys, values, strict=True)})
            cfg = compose("config", overrides=overrides)
            validate_with_or_without_extra(cfg)
            assert cfg.method.name == values[keys.index("method")]
            assert cfg.experiment.name == values[keys.index("experiment")]
            for key, value in zip(keys, values, strict=True):
                if key not in ("method", "experiment"):
                    got = OmegaConf.select(cfg, key)
                    if OmegaConf.is_dict(got):  # a config group (task=guess_check): its name
                        got = got.get("name")
                    assert got == value, key


def test_sweep_commands_are_one_multirun_per_part(capsys):
    (cmd,) = run_sweep.sweep_commands("fig7", ["train.steps=2"])
    assert cmd[:4] == [sys.executable, "-m", "src.run", "-m"]
    assert cmd[4:] == [
        "seed=0,1,2",  # outermost: a sweep stopped part-way holds whole seeds of every cell
        "method=clip_0.8_1.5,clip_0.5_1.2",
        "experiment=staleness_4x",
        "train.steps=2",
    ]
    control, stale, control_long, stale_long = run_sweep.sweep_commands("random_reward", [])
    shared = ["task.reward=random", "logger.entropy_change=true"]  # YAML true as Hydra's true
    methods = "method=ppo,clip_0.8_1.5,clip_0.5_1.2,clip_higher,bapo"
    assert control[4:] == ["seed=0,1,2", "method=ppo", "experiment=staleness_1x", *shared]
    assert stale[4:] == ["seed=0,1,2", methods, "experiment=staleness_4x",
                         "train.staleness_mode=minibatch,fixed_update", *shared]
    assert control_long[4:] == ["seed=0,1,2,3,4", *control[5:], "train.steps=100"]
    assert stale_long[4:] == ["seed=0,1,2,3,4", methods, "experiment=staleness_4x",
                              "train.staleness_mode=minibatch", *shared, "train.steps=100"]
    assert config_error(capsys, lambda: run_sweep.sweep_commands("nope", [])).startswith(
        "unknown sweep 'nope'; choose one of ['")


def test_part_keeps_only_the_named_parts_in_the_sweeps_order(capsys):
    # random_reward has four parts; --part 4 --part 2 runs the 2nd then the 4th, the same
    # commands the whole sweep gives for them.
    every = run_sweep.sweep_commands("random_reward", ["train.steps=2"])
    assert run_sweep.sweep_commands("random_reward", ["train.steps=2"], [4, 2]) == [every[1], every[3]]
    assert run_sweep.sweep_commands("random_reward", [], [2, 2]) == [run_sweep.sweep_commands("random_reward", [])[1]]
    line = config_error(capsys, lambda: run_sweep.sweep_commands("random_reward", [], [5]))
    assert line == "--part 5: sweep 'random_reward' has parts 1-4 (experiments/sweeps.yaml); pick from those"
    assert config_error(capsys, lambda: run_sweep.sweep_commands("random_reward", [], [0])).startswith("--part 0:")


def test_part_with_all_is_refused(capsys):
    line = config_error(capsys, lambda: run_sweep.main(["all", "--part", "1", "--dry-run"]))
    assert line == "--part picks parts of one sweep; name the sweep instead of 'all'"


@pytest.mark.parametrize("entry", [
    {"grid": {"seed": [0]}, "parts": [{"seed": [0]}]},
    {"description": "neither"},
    {"parts": []},
    {"parts": [{"seed": [0]}, "method=ppo"]},
    {"grid": {"seed": [0]}},  # no primary metric: fixed before a sweep runs
    {"grid": {"seed": [0]}, "primary_metric": "reward"},
])
def test_a_malformed_sweep_entry_is_named(entry, capsys):
    line = config_error(capsys, lambda: run_sweep.sweep_grids("bad", {"bad": entry}))
    assert line.startswith("sweeps.yaml: sweep 'bad'")


@pytest.mark.parametrize(("argv", "line"), [
    (["nope"], "unknown sweep 'nope'; choose one of ['"),
    (["main", "--workers", "0"], "--workers must be >= 1 (runs at a time), got 0"),
    (["main", "--workers", "2"], "--workers needs a parallel launcher (joblib, submitit_local, "
                                 "submitit_slurm); the basic launcher runs one run at a time"),
])
def test_bad_input_exits_2_with_one_line_as_src_run_does(argv, line, capsys):
    # before anything is composed, checked or launched
    assert config_error(capsys, lambda: run_sweep.main(argv)).startswith(line)


def test_every_part_is_checked_before_the_first_runs(capsys):
    # A bad job in the last part stops the sweep with one config-error line before part 1
    # starts (check_all runs nothing: it only composes and checks).
    control, stale, *_ = run_sweep.sweep_commands("random_reward", [])
    with pytest.raises(SystemExit) as exit_:
        run_sweep.check_all([control, [*stale, "train.staleness_mode=nope"]])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("config error: train.staleness_mode") and "experiment=staleness_4x" in err  # part 2
