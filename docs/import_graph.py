"""The package's import structure as a mermaid graph, read from the code with `ast`.

    python docs/import_graph.py [REPO_ROOT]            # prints the graph (docs/architecture.md)
    python docs/import_graph.py [REPO_ROOT] --cycles   # lists the import cycles and counts them

Nodes: the top-level modules of src/, its subpackages (one node each), and analysis/ as
one node. An edge A --> B: some module of A imports B, at the top or inside a function.

`--cycles` lists every strongly connected component of more than one node, first between
modules (src.config, src.run_dir, src.schedule.partial, ...: an edge is an import of that
module, top-level or late, and `from pkg import name` counts as importing pkg.name when that
is a module, else pkg), then between the graph's nodes above. It exits 0 either way.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

WHERE = ("src", "analysis")


def component(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "analysis":
        return "analysis"
    if parts[0] != "src" or len(parts) < 2:
        return None
    return ".".join(parts[:2])


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


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


def _sources(root: Path) -> list[Path]:
    return sorted(p for where in WHERE for p in (root / where).rglob("*.py"))


def edges(root: Path) -> set[tuple[str, str]]:
    def dotted(path: Path) -> str:  # src/__init__.py is its own node, src.__init__
        return ".".join(path.relative_to(root).with_suffix("").parts)

    known = {component(dotted(p)) for p in _sources(root)}
    out = set()
    for path in _sources(root):
        here = component(dotted(path))
        for name in imports(path, root):
            there = component(name)
            if here and there and there in known and there != here:
                out.add((here, there))
    return out


def module_imports(path: Path, root: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `path` imports by name (see the module's docstring)."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                if sub in known:
                    found.add(sub)
                elif node.module in known:
                    found.add(node.module)
    return found


def module_edges(root: Path) -> dict[str, set[str]]:
    known = {module_name(p, root) for p in _sources(root)}
    graph: dict[str, set[str]] = {m: set() for m in known}
    for path in _sources(root):
        here = module_name(path, root)
        graph[here] |= module_imports(path, root, known) - {here}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                found.append(sorted(scc))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def cycle_report(root: Path) -> str:
    modules = module_edges(root)
    nodes: dict[str, set[str]] = {}
    for a, b in edges(root):
        nodes.setdefault(a, set()).add(b)
    lines = []
    for label, graph in (("modules", modules), ("graph nodes", nodes)):
        found = cycles(graph)
        lines.append(f"import cycles between {label}: {len(found)}")
        for scc in found:
            inner = sorted(f"{a} -> {b}" for a in scc for b in graph.get(a, ()) if b in scc)
            lines.append(f"  {{{', '.join(scc)}}}: {'; '.join(inner)}")
    return "\n".join(lines)


def mermaid(root: Path) -> str:
    lines = ["graph LR"]
    lines += [f"  {a.replace('.', '_')}[{a}] --> {b.replace('.', '_')}[{b}]"
              for a, b in sorted(edges(root))]
    return "\n".join(lines)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--cycles"]
    repo = Path(args[0]) if args else Path(__file__).resolve().parents[1]
    print(cycle_report(repo) if "--cycles" in sys.argv[1:] else mermaid(repo))
