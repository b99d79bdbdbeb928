"""The config depends on nothing (issue 73): src/config.py imports no subsystem, at module
level or inside a function; what its checks need from the registries it reads through
src/registry.py, and every name it reads there is provided once the registries load."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

from tests.conftest import REPO

SRC = REPO / "src"
THIRD_PARTY = {"omegaconf", "yaml"}
# The project modules the config may import: plain-Python leaves that import no subsystem
# (only the standard library and each other), each named with why the config needs it.
LEAVES = {
    "src.config_fields": "setting(), the field checks and ConfigError: the config's own parts",
    "src.registry": "the one door to the registries (methods, sources, tasks, corrections, "
                    "the tiny model), which they fill on import",
    "src.run_vocab": "the run dir's vocabulary: the method section's shared keys",
    "src.choices": "the choices of anchors, weight rules and sampler precisions",
    "src.model_dtypes": "model.dtype's names",
    "src.updates": "the staleness modes and splits, and the mini-batch size the checks compare",
    "src.eval_schedule": "eval.at's rule, the one the trainer's schedule follows",
    "src._numerics": "the numerics modes, and the one this process loaded torch in (the default)",
}
# What a leaf may import besides: _numerics reads torch's build inside `fingerprint()`, after
# torch has loaded (meta.json); the config never calls it, and importing it loads no torch.
LEAF_EXTRAS = {"src._numerics": {"torch"}}


def imported_modules(path) -> set[str]:
    """Every module `path` imports, at any depth (function-level imports count)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "src":  # `from src import registry`
                out |= {f"src.{alias.name}" for alias in node.names}
            else:
                out.add(node.module)
    return out


def _not_allowed(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] not in sys.stdlib_module_names
                  and m.split(".")[0] not in THIRD_PARTY and m not in LEAVES)


def test_the_config_imports_no_subsystem():
    assert _not_allowed(imported_modules(SRC / "config.py")) == []


def test_the_config_s_project_imports_are_leaves():
    for module in LEAVES:
        path = SRC / f"{module.removeprefix('src.').replace('.', '/')}.py"
        imported = imported_modules(path)
        assert [m for m in imported if m.split(".")[0] not in sys.stdlib_module_names
                and m not in LEAVES and m not in LEAF_EXTRAS.get(module, ())] == [], module


def test_importing_the_config_loads_no_torch_and_no_subsystem():
    code = ("import sys, src.config; print(sorted(m for m in sys.modules if m.startswith('src'))); "
            "print('torch' in sys.modules, 'hydra' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert set(eval(out[0])) <= {"src", "src.config", *LEAVES}  # noqa: S307 - our own output
    assert out[1] == "False False"


def test_every_name_the_config_reads_is_provided_once_the_registries_load():
    import src.compose  # noqa: F401 - what a run composes against
    from src import registry

    text = (SRC / "config.py").read_text()
    read = set(re.findall(r'registry\.read\("([\w.]+)"\)', text))
    read |= set(re.findall(r'_one_of_registered\("([\w.]+)"\)', text))
    assert read and all(registry.read(name) is not None for name in read)
