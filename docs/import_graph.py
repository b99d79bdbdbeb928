"""The package's import structure as a mermaid graph, read from the code with `ast`.

    python docs/import_graph.py [REPO_ROOT]      # prints the graph (docs/architecture.md)

Nodes: the top-level modules of src/, its subpackages (one node each), and analysis/ as
one node. An edge A --> B: some module of A imports B, at the top or inside a function.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def component(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "analysis":
        return "analysis"
    if parts[0] != "src" or len(parts) < 2:
        return None
    return ".".join(parts[:2])


def imports(path: Path, root: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def edges(root: Path) -> set[tuple[str, str]]:
    known = {component(".".join(p.relative_to(root).with_suffix("").parts))
             for where in ("src", "analysis") for p in (root / where).rglob("*.py")}
    out = set()
    for where in ("src", "analysis"):
        for path in (root / where).rglob("*.py"):
            here = component(".".join(path.relative_to(root).with_suffix("").parts))
            for name in imports(path, root):
                there = component(name)
                if here and there and there in known and there != here:
                    out.add((here, there))
    return out


def mermaid(root: Path) -> str:
    lines = ["graph LR"]
    lines += [f"  {a.replace('.', '_')}[{a}] --> {b.replace('.', '_')}[{b}]"
              for a, b in sorted(edges(root))]
    return "\n".join(lines)


if __name__ == "__main__":
    print(mermaid(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]))
