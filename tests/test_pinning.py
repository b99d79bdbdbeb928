"""No import changes the process: importing the run vocabulary, any analysis module or a plug
leaves the environment and torch's thread settings as they were; the entry points pin
explicitly, before torch loads (src/pinning.py), and `pin_process()` pins as `import src` did."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest

from src._numerics import ENV_MODE, ENV_PINNED, PORTABLE_PINS
from tests.conftest import REPO

# What the library pins; a process started here must not inherit them, or an import that
# pins again would change nothing that the test could see.
PINNED_ENV = (*PORTABLE_PINS, ENV_MODE, ENV_PINNED, "GOMP_SPINCOUNT")
# The programs that pin before torch loads (each calls pin_process first thing).
ENTRY_POINTS = ("src/run.py", "src/integrations/trl_launch.py", "experiments/run_sweep.py",
                "experiments/verify_cell.py", "experiments/warm_starts/rebuild.py",
                "benchmarks/gpu_check.py", "benchmarks/gpu_estimate.py",
                "benchmarks/bench_decoding.py", "benchmarks/bench_launchers.py",
                "benchmarks/bench_numerics.py", "benchmarks/bench_objectives.py",
                "benchmarks/bench_offpolicy.py", "benchmarks/bench_telemetry.py",
                "benchmarks/bench_token_view.py", "benchmarks/bench_vs_trl.py",
                "benchmarks/bench_update_reuse.py", "benchmarks/bench_wait_policy.py",
                "experiments/calibration/pretrained_regime.py",
                "experiments/calibration/pretrained_compile.py")


def _fresh(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in PINNED_ENV}
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300, check=True)


def _analysis_modules() -> list[str]:
    return sorted(".".join(p.relative_to(REPO).with_suffix("").parts)
                  for p in (REPO / "analysis").rglob("*.py") if p.name != "__init__.py")


def _plugs() -> list[str]:
    """The plugs importable here (TRL's needs trl)."""
    import importlib.util

    plugs = ["src.integrations", "src.integrations.tasks", "src.integrations.verl_losses"]
    if importlib.util.find_spec("trl") is not None:
        plugs += ["src.integrations.trl_grpo", "src.integrations.trl_launch"]
    return plugs


@pytest.mark.slow
def test_importing_the_vocabulary_analysis_or_a_plug_changes_nothing_in_the_process():
    modules = ["src", "src.run_vocab", *_analysis_modules(), *_plugs()]
    # The libraries the plugs build on are loaded first: what they set is theirs, in the
    # user's process with or without the plug (TRL's trainer loads torch._dynamo, whose import
    # sets TORCHINDUCTOR_CACHE_DIR).
    code = ("import importlib, importlib.util, json, os\nimport torch\n"
            "for lib in ('transformers', 'trl', 'verl'):\n"
            "    if importlib.util.find_spec(lib) is not None:\n"
            "        importlib.import_module(lib)\n"
            "        if lib == 'trl':\n"
            "            from trl import GRPOTrainer\n"
            "def seen():\n"
            "    return dict(os.environ), torch.get_num_threads(), torch.get_num_interop_threads()\n"
            "before = seen()\n"
            f"for name in {modules!r}:\n"
            "    importlib.import_module(name)\n"
            "after = seen()\n"
            "env = sorted(k for k in set(before[0]) | set(after[0]) if before[0].get(k) != after[0].get(k))\n"
            "print(json.dumps([env, before[1:], after[1:]]))")
    changed, threads_before, threads_after = json.loads(_fresh(code).stdout.splitlines()[-1])
    assert changed == [] and threads_after == threads_before


def test_pin_process_pins_as_importing_src_did_and_only_once():
    code = ("import json, os, sys\nfrom src.pinning import pin_process\n"
            "first = pin_process(['numerics=portable'])\nsecond = pin_process(['numerics=native'])\n"
            f"print(json.dumps([first, second, 'torch' in sys.modules, "
            f"{{k: os.environ.get(k) for k in {list(PORTABLE_PINS) + [ENV_MODE]!r}}}]))")
    first, second, torch_loaded, env = json.loads(_fresh(code).stdout)
    assert not torch_loaded  # it pins what torch reads when it loads, so it loads nothing
    assert first == second  # a second call changes nothing
    assert first["numerics"]["mode"] == "portable" and env[ENV_MODE] == "portable"
    if first["numerics"]["note"] is None:  # x86-64: the pins are set
        assert {k: env[k] for k in PORTABLE_PINS} == PORTABLE_PINS
    assert set(first["omp_wait"]) == {"GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "reason"}


def _module_level_pins(path) -> list[int]:
    """Lines where `pin_process()` runs at import, outside `if __name__ == "__main__":`."""
    tree = ast.parse(path.read_text())
    lines = []
    for node in tree.body:
        guarded = (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                   and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__")
        if guarded:
            continue
        for inner in ast.walk(node) if not isinstance(node, ast.FunctionDef | ast.ClassDef) else ():
            if (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name)
                    and inner.func.id == "pin_process"):
                lines.append(inner.lineno)
    return lines


def test_no_module_of_src_or_analysis_pins_when_imported():
    found = {str(p.relative_to(REPO)): _module_level_pins(p)
             for where in ("src", "analysis") for p in sorted((REPO / where).rglob("*.py"))}
    assert {k: v for k, v in found.items() if v} == {}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_each_entry_point_pins_before_it_loads_torch(entry):
    text = (REPO / entry).read_text()
    assert "pin_process()" in text, entry
    tree = ast.parse(text)
    top_torch = [n.lineno for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)
                 and any(a.name.split(".")[0] == "torch" for a in n.names)
                 or isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "torch"]
    first_pin = min(n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Name) and n.func.id == "pin_process")
    assert all(first_pin < line for line in top_torch), entry
