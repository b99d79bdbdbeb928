"""The 2025-26 clip family (sapo, dppo_tv, dppo_kl, gppo, dcpo, aspo) run end to end and
resume: a run that dies after a checkpoint and is started again with the same command ends
with the same records and token rows as one that never stopped."""

from __future__ import annotations

import math

import pytest

import src.trainer as trainer_module
from src.run import execute
from tests.conftest import compose, token_rows
from tests.test_e2e import read_metrics
from tests.test_reliability import _strip_times

FAMILY = ("sapo", "dppo_tv", "dppo_kl", "gppo", "dcpo", "aspo")  # ce_gppo is gppo's code


class Crash(Exception):
    """Stands in for the process dying right after a checkpoint."""


@pytest.mark.slow
@pytest.mark.parametrize("method", FAMILY)
def test_crash_after_a_checkpoint_then_resume_matches(tmp_path, smoke_overrides, monkeypatch, method):
    overrides = [*smoke_overrides, f"method={method}", "checkpoint.every=1"]
    reference = tmp_path / "reference"
    assert execute(compose(overrides), reference) == "finished"

    real = trainer_module.save_checkpoint

    def crash_after_step_2(directory, state, *args, **kwargs):
        real(directory, state, *args, **kwargs)
        if state.step == 2:
            raise Crash

    crashed = tmp_path / "crashed"
    monkeypatch.setattr(trainer_module, "save_checkpoint", crash_after_step_2)
    with pytest.raises(Crash):
        execute(compose(overrides), crashed)
    monkeypatch.undo()
    assert execute(compose(overrides), crashed) == "finished"

    a, b = read_metrics(reference), read_metrics(crashed)
    assert [r["step"] for r in b["step"]] == [0, 1, 2]
    for kind in ("update", "step", "eval"):
        assert _strip_times(a[kind]) == _strip_times(b[kind]), kind
    assert token_rows(reference) == token_rows(crashed)
    # the method's own record keys are written, and never as NaN
    for record in a["update"]:
        assert all(not (isinstance(v, float) and math.isnan(v)) for v in record.values())
