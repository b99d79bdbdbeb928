"""The run-dir vocabulary lives in one module that analysis/ can import without torch or
Hydra, and every other name is derived from its clip-state list."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import torch

from src import run_vocab
from src.algorithms.surrogate import carries_gradient
from tests.conftest import REPO

DEFINED_ONCE = ("CLIP_STATES", "NO_GRADIENT_STATES", "STATE_FRACTIONS", "STEP_MEAN_KEYS",
                "NON_NUMERIC_KEYS", "ADDED_SECTIONS", "LEGACY_METHOD_PARAMS", "RATIO_BIN_EDGES")


def _loaded_after(imports: str, modules: tuple[str, ...]) -> list[str]:
    """Which of `modules` a fresh interpreter has loaded after `imports`."""
    code = f"import sys; {imports}; print(sorted(m for m in {modules!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True)
    return ast.literal_eval(out.stdout.strip())


def test_importing_the_vocabulary_imports_neither_torch_nor_hydra():
    assert _loaded_after("import src.run_vocab", ("torch", "hydra", "omegaconf")) == []


def test_analysis_reads_the_vocabulary_without_torch():
    imports = "import analysis.core.loader, analysis.figures.tokens, analysis.figures.lag_bapo, analysis.reports.lag"
    assert _loaded_after(imports, ("torch",)) == []


def test_analysis_counts_a_runs_updates_with_the_trainers_functions_without_torch():
    # analysis/core/final.py and lag_runs.py call src/updates.py, as src/schedule does
    assert _loaded_after("import src.updates, analysis.core.final, analysis.core.lags",
                         ("torch", "hydra", "omegaconf")) == []


def test_no_module_keeps_its_own_copy_of_the_vocabulary():
    defines = re.compile(rf"^({'|'.join(DEFINED_ONCE)})\s*=", re.M)
    hits = [str(p.relative_to(REPO)) for where in ("src", "analysis")
            for p in sorted((REPO / where).rglob("*.py"))
            if p.name != "run_vocab.py" and defines.search(p.read_text())]
    assert hits == []


def test_every_state_but_none_has_a_step_mean_fraction():
    for state in run_vocab.CLIP_STATES[1:]:
        assert state.fraction in run_vocab.STATE_FRACTIONS
        assert state.fraction in run_vocab.STEP_MEAN_KEYS


def test_the_gradient_rule_is_the_states_flag():
    codes = torch.arange(len(run_vocab.CLIP_STATES), dtype=torch.int8)
    assert carries_gradient(codes).tolist() == [s.carries_gradient for s in run_vocab.CLIP_STATES]
    assert run_vocab.NO_GRADIENT_STATES == ("clip_low", "clip_high", "dual", "masked")


def test_meta_has_the_identity_then_the_engines_fields():
    meta = run_vocab.run_meta(versioned=("pyyaml",), device="cpu", method="ppo",
                              experiment="smoke", staleness=2, seed=1, resumed_at_step=None,
                              engine="trl")
    assert {k: meta[k] for k in ("device", "method", "experiment", "staleness", "seed",
                                 "resumed_at_step", "engine")} == {
        "device": "cpu", "method": "ppo", "experiment": "smoke", "staleness": 2, "seed": 1,
        "resumed_at_step": None, "engine": "trl"}
    assert {"git_commit", "versions", "start_time"} <= set(meta)
