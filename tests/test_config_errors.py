"""Bad configs fail before any work: exit code 2, one line naming the key, no run dir."""

from __future__ import annotations

import subprocess
import sys

import pytest

from src import run as run_module
from tests.conftest import REPO

BAD_CONFIGS = [
    (["train.staleness=0"], "train.staleness"),
    (["train.staleness=-2"], "train.staleness"),
    (["train.staleness=3"], "train.staleness"),  # 16 x 8 = 128 responses, 3 does not divide
    (["method=bapo", "method.bapo.rho0=1.5"], "method.bapo.rho0"),
    (["method=bapo", "method.bapo.rho0=0"], "method.bapo.rho0"),
    (["method.c_low=1.3", "method.c_high=1.2"], "method.c_low"),
    (["method=bapo", "method.bapo.low_max=1.3"], "method.bapo.low_max"),
    (["method=bapo", "method.bapo.high_start=3.5"], "method.bapo.high_start"),
    (["train.steps=0"], "train.steps"),
    (["train.steps=-5"], "train.steps"),
    (["method=top_entropy", "method.q=0"], "method.q"),
    (["method=top_entropy", "method.q=1.5"], "method.q"),
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
]


@pytest.mark.parametrize(("overrides", "key"), BAD_CONFIGS, ids=lambda v: str(v))
def test_bad_config_exits_2_naming_key(overrides, key, tmp_path, monkeypatch, capsys):
    run_dir = tmp_path / "run"
    argv = ["src.run", *overrides, f"hydra.run.dir={run_dir}", f"cache_dir={tmp_path / 'cache'}"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_info:
        run_module.main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("config error: "), err
    assert key in err, f"message does not name {key}: {err}"
    assert not run_dir.exists()
    assert not (tmp_path / "cache").exists()


def test_cli_process_exit_code(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "src.run", "method=bapo", "method.bapo.rho0=2",
         f"hydra.run.dir={run_dir}"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "config error: method.bapo.rho0 must be in (0, 1), got 2.0"
    assert not run_dir.exists()
