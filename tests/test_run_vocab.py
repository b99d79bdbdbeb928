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


def test_the_clip_familys_states_are_appended_and_keep_a_gradient():
    # sapo's soft gate, gppo's preserved clip and aspo's capped dual clip change a token's
    # gradient without removing it; appended after kl_penalty, so no earlier code moved
    names = [s.name for s in run_vocab.CLIP_STATES]
    assert names[8:] == ["gated", "preserved_low", "preserved_high", "dual_capped"]
    assert all(s.carries_gradient for s in run_vocab.CLIP_STATES[8:])
    assert {s.fraction for s in run_vocab.CLIP_STATES[8:]} == {
        "gated_frac", "preserved_low_frac", "preserved_high_frac", "dual_capped_frac"}


def test_every_state_but_none_has_a_colour_in_the_token_viewer():
    # the viewer colours tokens by state (analysis/reports/token_view.js CLIP_COLORS); a state without
    # an entry would show as `none`
    script = (REPO / "analysis" / "reports" / "token_view.js").read_text()
    colours = re.search(r"const CLIP_COLORS = \{(.*?)\};", script, re.S).group(1)
    coloured = set(re.findall(r"(\w+):\s*\"#", colours))
    assert coloured == set(run_vocab.CLIP_STATE_NAMES[1:])


def test_the_methods_own_record_keys_are_averaged_per_step():
    # the clip family's per-update numbers (gate, divergence, bounds, entropy share) reach the
    # step record as means over its updates, as m2po's do; an update without one (None) is
    # left out of its mean
    from src.records import update_means

    keys = ("sapo_gate_pos", "sapo_gate_neg", "sapo_grad_pos_share", "dppo_divergence", "dcpo_c_low_neg",
            "dcpo_c_high_pos", "aspo_high_entropy_frac")
    step = update_means([{k: 0.5 for k in keys}, {k: 0.75 for k in keys}, {k: None for k in keys}])
    assert {k: step[k] for k in keys} == {k: 0.625 for k in keys}
