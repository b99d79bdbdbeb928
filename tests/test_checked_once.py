"""Each check has one home and runs once: BAPO's grid once per config, model.dtype against
one list."""

from __future__ import annotations

import pytest

from src.config import ConfigError
from src.integrations._common import resolve_method
from tests.conftest import compose


def test_a_config_checks_bapos_grid_once(monkeypatch):
    from src.algorithms import bapo as search

    calls = []
    real = search.check_grid
    monkeypatch.setattr(search, "check_grid", lambda grid: (calls.append(grid), real(grid))[1])
    method = compose(["method=bapo"]).method  # src.run: the config, then the trainer's build
    method.build(), method.build()
    assert len(calls) == 1
    calls.clear()
    resolved = resolve_method("bapo")  # the plugs: resolve, then build per engine
    resolved.build(), resolved.build()
    assert len(calls) == 1
    method.params.rho0 = 0.3  # a changed value is checked anew
    assert method.build().grid.rho0 == 0.3 and len(calls) == 2


def test_model_dtype_is_checked_against_one_list():
    from src.model_dtypes import MODEL_DTYPES
    from src.models.hf import parse_dtype

    for name, alias in MODEL_DTYPES.items():
        assert compose([f"model.dtype={name}"]).model.dtype == name
        assert str(parse_dtype(name)) == str(parse_dtype(alias)) == f"torch.{name}"
    with pytest.raises(ConfigError, match="model.dtype"):
        compose(["model.dtype=float64"])
    with pytest.raises(ValueError, match="model.dtype"):
        parse_dtype("float64")


def test_a_run_is_validated_once_by_its_preflight(tmp_path, monkeypatch):
    """`python -m src.run`: preflight composes and validates each job before Hydra makes its
    dir; the job Hydra then starts takes that Config when its values are the same."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    import src.run as run
    from src import preflight

    calls = []
    real = preflight.validate
    monkeypatch.setattr(preflight, "validate", lambda raw: (calls.append("preflight"), real(raw))[1])
    monkeypatch.setattr(run, "validate", lambda raw: (calls.append("job"), real(raw))[1])
    args = ["experiment=smoke", f"hydra.run.dir={tmp_path / 'run'}", f"cache_dir={tmp_path / 'cache'}"]
    run.preflight(args)
    with initialize_config_dir(config_dir=str(run.CONF_DIR), version_base="1.3"):
        raw = hydra_compose(config_name="config", overrides=args)  # as hydra.main hands it on
        other = hydra_compose(config_name="config", overrides=[*args, "seed=1"])
    cfg = run.checked_config(raw)
    assert calls == ["preflight"] and cfg.experiment.name == "smoke"
    run.preflight(args)
    assert run.checked_config(other).seed == 1  # other values than preflight's: validated anew
    assert calls == ["preflight", "preflight", "job"]
    run.preflight(["-m", "seed=0,1", *args[:1], f"hydra.sweep.dir={tmp_path / 'sweep'}",
                   *args[2:]])  # a multirun: each job once
    assert run.checked_config(other).seed == 1 and run.checked_config(raw).seed == 0
    assert calls == ["preflight", "preflight", "job", "preflight", "preflight"]
    assert not (tmp_path / "run").exists() and not (tmp_path / "sweep").exists()
