"""The package's import structure as a mermaid graph, read from the code with `ast`.

    python docs/import_graph.py [REPO_ROOT]            # prints the graph (docs/architecture.md)
    python docs/import_graph.py [REPO_ROOT] --cycles   # lists the import cycles and counts them
    python docs/import_graph.py [REPO_ROOT] --summary  # each node's size, layer and edges

Nodes: the top-level modules of src/, its subpackages (one node each), and analysis/ as
one node. An edge A --> B: some module of A imports B, at the top or inside a function.

`--cycles` lists every strongly connected component of more than one node, first between
modules (src.config, src.run_dir, src.schedule.partial, ...: an edge is an import of that
module, top-level or late, and `from pkg import name` counts as importing pkg.name when that
is a module, else pkg), then between the graph's nodes above. It exits 0 either way.

`--summary` gives each node's lines (its files' lines summed), files, layer (0: it imports no
other node; else one above the highest node it imports; the nodes of a cycle share one
layer) and its edges out and in, then the totals.
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


def layers(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each node's layer: 0 when it imports no other node, else 1 + its highest target's;
    the nodes of one cycle are one node here (they share a layer)."""
    scc_of = {v: v for v in graph}
    for scc in cycles(graph):
        for v in scc:
            scc_of[v] = scc[0]
    out: dict[str, int] = {}

    def layer(v: str, seen: frozenset = frozenset()) -> int:
        head = scc_of[v]
        if head not in out:
            members = [u for u in graph if scc_of[u] == head]
            targets = {scc_of[w] for u in members for w in graph[u] if w in scc_of} - {head}
            out[head] = 1 + max((layer(t) for t in targets), default=-1)
        return out[head]

    return {v: layer(v) for v in graph}


def summary(root: Path) -> str:
    def dotted(path: Path) -> str:
        return ".".join(path.relative_to(root).with_suffix("").parts)

    sizes: dict[str, list[int]] = {}
    for path in _sources(root):
        node = component(dotted(path))
        if node:
            lines = len(path.read_text().splitlines())
            sizes.setdefault(node, [0, 0])
            sizes[node][0] += lines
            sizes[node][1] += 1
    graph: dict[str, set[str]] = {node: set() for node in sizes}
    for a, b in edges(root):
        graph[a].add(b)
    into = {node: sum(node in targets for targets in graph.values()) for node in graph}
    layer = layers(graph)
    rows = ["| node | lines | files | layer | imports | imported by |", "|---|---:|---:|---:|---:|---:|"]
    for node in sorted(graph, key=lambda n: (layer[n], n)):
        lines, files = sizes[node]
        rows.append(f"| {node} | {lines} | {files} | {layer[node]} | {len(graph[node])} | {into[node]} |")
    total = sum(len(t) for t in graph.values())
    rows.append(f"\n{len(graph)} nodes, {total} edges, {max(layer.values()) + 1} layers, "
                f"{sum(s[0] for s in sizes.values())} lines")
    return "\n".join(rows)


if __name__ == "__main__":
    flags = {"--cycles", "--summary"}
    args = [a for a in sys.argv[1:] if a not in flags]
    repo = Path(args[0]) if args else Path(__file__).resolve().parents[1]
    if "--summary" in sys.argv[1:]:
        print(summary(repo))
    else:
        print(cycle_report(repo) if "--cycles" in sys.argv[1:] else mermaid(repo))
