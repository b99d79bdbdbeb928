"""The docs' links resolve inside the repo: every figure a reader is shown exists in
figures/, and no link points at a file the repo does not hold."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted({ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *ROOT.glob("*/README.md"),
               *ROOT.glob("*/*/README.md"), *ROOT.glob("experiments/**/README.md"),
               *ROOT.glob("figures/**/REPORT.md")})
# [text](target) and ![alt](target); the target ends at the first space or ')'.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FIGURE = re.compile(r"(?<![\w/.])figures/[^\s)`'\"]+\.png")


def local_links(doc: Path) -> list[str]:
    """Link targets that name a file (no web address, no in-page anchor)."""
    targets = [t.split("#")[0] for t in LINK.findall(doc.read_text())]
    return [t for t in targets if t and "://" not in t and not t.startswith("mailto:")]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve_to_files_in_the_repo(doc):
    missing, outside = [], []
    for target in local_links(doc):
        path = (doc.parent / target).resolve()
        if not path.is_relative_to(ROOT):
            outside.append(target)
        elif not path.exists():
            missing.append(target)
    assert not outside, f"{doc.name} links outside the repo: {outside}"
    assert not missing, f"{doc.name} links to missing files: {missing}"


@pytest.mark.parametrize("doc", [d for d in DOCS if d.parent in (ROOT, ROOT / "docs")],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_figure_named_exists(doc):
    # Figures named in prose or code spans too, not only in links: relative to the repo root.
    named = set(FIGURE.findall(doc.read_text()))
    missing = sorted(n for n in named if not (ROOT / n).is_file())
    assert not missing, f"{doc.name} names figures that figures/ lacks: {missing}"
