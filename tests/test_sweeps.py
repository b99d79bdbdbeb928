"""experiments/sweeps.yaml and run_sweep.py: every sweep names real configs and the issue's grid."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

from experiments import run_sweep
from src.config import validate

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = yaml.safe_load((ROOT / "experiments" / "sweeps.yaml").read_text())


def test_sweeps_cover_the_reproduction_grid():
    def cells(name):
        g = SWEEPS[name]["grid"]
        return set(itertools.product(g["method"], g["experiment"], g["seed"]))

    seeds = (0, 1, 2)
    # At 1x clip_higher and bapo are ppo's update (every IS weight is 1), so the 1x cell
    # runs ppo and top_entropy only; 2x and 4x run all four.
    stale = {
        (m, f"staleness_{k}x", s)
        for m in ("ppo", "clip_higher", "top_entropy", "bapo")
        for k in (2, 4)
        for s in seeds
    }
    assert cells("main") == stale
    assert cells("main_1x") == {(m, "staleness_1x", s) for m in ("ppo", "top_entropy") for s in seeds}
    assert cells("fig7") == {
        (m, "staleness_4x", s) for m in ("clip_0.8_1.5", "clip_0.5_1.2") for s in seeds
    }
    assert cells("readings") == {
        (m, "staleness_4x", s) for m in ("bapo_value", "bapo_official") for s in seeds
    }
    assert cells("staleness_8x") == {(m, "staleness_8x", s) for m in ("ppo", "bapo") for s in seeds}
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


@pytest.mark.parametrize("name", sorted(SWEEPS))
def test_every_cell_composes_and_validates(name):
    grid = SWEEPS[name]["grid"]
    extra = [f"{k}={v[0]}" for k, v in grid.items() if k not in ("method", "experiment", "seed")]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        for method, experiment in itertools.product(grid["method"], grid["experiment"]):
            cfg = compose("config", overrides=[f"method={method}", f"experiment={experiment}", *extra])
            validate(cfg)
            assert cfg.method.name == method and cfg.experiment.name == experiment


def test_sweep_command_is_one_multirun():
    cmd = run_sweep.sweep_command("fig7", ["train.steps=2"])
    assert cmd[:4] == [sys.executable, "-m", "src.run", "-m"]
    assert cmd[4:] == [
        "seed=0,1,2",  # outermost: a sweep stopped part-way holds whole seeds of every cell
        "method=clip_0.8_1.5,clip_0.5_1.2",
        "experiment=staleness_4x",
        "train.steps=2",
    ]
    with pytest.raises(SystemExit, match="unknown sweep 'nope'"):
        run_sweep.sweep_command("nope", [])
