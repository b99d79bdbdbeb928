"""The shape of src/ that issue 57 set: the trainer is the loop, no function is long, no
import goes round in a cycle, the generation asks nothing private of the trainer, the
config never reaches into the warm start's training loop, and the TRL plug's trainer holds
only TRL's glue (issue 73)."""

from __future__ import annotations

import ast
import importlib.util

from tests.conftest import REPO

SRC = REPO / "src"
MAX_FUNCTION_LINES = 60


def _tree(path):
    return ast.parse(path.read_text())


def test_no_function_in_src_is_over_60_lines():
    long = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if node.end_lineno - start + 1 > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}")
    assert long == []


def test_the_trainer_is_the_loop():
    path = SRC / "trainer.py"
    assert len(path.read_text().splitlines()) < 300
    (trainer,) = [n for n in _tree(path).body if isinstance(n, ast.ClassDef) and n.name == "Trainer"]
    assert trainer.end_lineno - trainer.lineno + 1 <= 250


def test_the_trl_plug_keeps_only_trls_glue():
    """ProjectGRPOTrainer is __init__, the loss and thin overrides of TRL's hooks; the run
    dir's bookkeeping is src/integrations/trl_run_dir.py's."""
    tree = _tree(SRC / "integrations" / "trl_grpo.py")
    (plug,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ProjectGRPOTrainer"]
    assert plug.end_lineno - plug.lineno + 1 < 250


def test_no_import_cycle():
    spec = importlib.util.spec_from_file_location("import_graph", REPO / "docs" / "import_graph.py")
    graph = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(graph)
    assert graph.cycles(graph.module_edges(REPO)) == []
    nodes: dict[str, set[str]] = {}
    for a, b in graph.edges(REPO):
        nodes.setdefault(a, set()).add(b)
    assert graph.cycles(nodes) == []


def _imported_names(path) -> list[tuple[str, str]]:
    out = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and node.module:
            out += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            out += [(alias.name, "") for alias in node.names]
    return out


def test_generation_imports_nothing_private_and_nothing_of_the_trainer():
    imported = [(m, n) for m, n in _imported_names(SRC / "generation.py") if m.startswith("src")]
    assert [(m, n) for m, n in imported if n.startswith("_") or "._" in m] == []
    assert [m for m, _ in imported if m.startswith(("src.trainer", "src.update",
                                                     "src.minibatches"))] == []


def test_the_config_asks_the_warm_start_only_its_small_interface():
    # through src/registry.py: the config imports no subsystem (tests/test_config_imports.py)
    import re

    text = (SRC / "config.py").read_text()
    assert not [m for m, _ in _imported_names(SRC / "config.py") if m.startswith("src.warm_start")]
    assert set(re.findall(r'registry\.read\("(tiny_model\.\w+)"\)', text)) == {
        "tiny_model.settings_problem", "tiny_model.layers", "tiny_model.shape"}
