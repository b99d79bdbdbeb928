"""experiments/README.md's table names every results root under experiments/, and only those,
each with its size and what reads it: a root nobody can account for costs every clone."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO

ROW = re.compile(r"^\| `experiments/([^/`]+)/` \|(.*)\|$", re.M)
SIZE = re.compile(r"\d+(\.\d+)?[KMG]")  # as `du -sh` prints it


def table_rows(experiments: Path) -> dict[str, list[str]]:
    rows = {}
    for name, rest in ROW.findall((experiments / "README.md").read_text()):
        assert name not in rows, f"experiments/README.md lists {name} twice"
        rows[name] = [cell.strip() for cell in rest.split("|")]
    return rows


def index_problems(experiments: Path) -> list[str]:
    """Each way the table and the folders disagree, one line each; none when they agree."""
    rows = table_rows(experiments)
    # __pycache__ and hidden folders are no roots; every other folder is one
    on_disk = {p.name for p in experiments.iterdir()
               if p.is_dir() and not p.name.startswith(("_", "."))}
    problems = [f"{name}: a root missing from the table" for name in sorted(on_disk - set(rows))]
    problems += [f"{name}: no such root" for name in sorted(set(rows) - on_disk)]
    for name, cells in rows.items():
        if len(cells) != 5:
            problems.append(f"{name}: {len(cells)} cells after the root, not 5")
            continue
        size, _, holds, made_by, read_by = cells
        if not SIZE.fullmatch(size):
            problems.append(f"{name}: size {size!r} is not du -sh's")
        if not (holds and made_by and read_by):
            problems.append(f"{name}: what it holds, what made it or what reads it is empty")
    return problems


def test_the_table_lists_every_root_with_its_size_and_readers():
    assert index_problems(REPO / "experiments") == []


def test_a_missing_root_a_gone_root_and_an_empty_cell_are_each_caught(tmp_path):
    for name in ("grid", "new_root", "__pycache__"):
        (tmp_path / name).mkdir()
    (tmp_path / "README.md").write_text(
        "| root | size | runs | holds | made by | read by |\n|---|---|---|---|---|---|\n"
        "| `experiments/grid/` | 1.2M | 3 (0.02) | a grid | a sweep | |\n"
        "| `experiments/gone/` | 4K | 0 | nothing | nobody | a doc |\n")
    assert index_problems(tmp_path) == [
        "new_root: a root missing from the table",
        "gone: no such root",
        "grid: what it holds, what made it or what reads it is empty",
    ]
