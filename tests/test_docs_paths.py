"""Every repo path a doc names exists: the READMEs, docs/*.md and the committed reports.

A path is a token of a backticked span or a fenced code block that starts with one of the
repo's top folders (`src/`, `analysis/`, ...), read from the repo root; the docs' markdown
links are tests/analysis/test_doc_links.py's. A placeholder (`<name>`, `{4x,16x}`,
`...`) or a glob (`seed*`) must match at least one file, so that the pattern points at a real
place. Paths with `=` and `,` in them are Hydra override dirs (`correction=tis,train.threads=1`)
and are kept whole.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest

from tests.conftest import REPO

TOP_FOLDERS = ("src/", "analysis/", "docs/", "tests/", "experiments/", "benchmarks/", "conf/",
               "figures/", ".ci/")
DOC_GLOBS = ("README.md", "docs/*.md", "analysis/README.md", "benchmarks/README.md",
             "experiments/**/README.md", "figures/**/REPORT.md")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
PLACEHOLDER = re.compile(r"<[^>\s]*>|\{[^}\s]*\}|\.\.\.")


def _docs() -> list[str]:
    found = {p for pattern in DOC_GLOBS for p in glob.glob(pattern, root_dir=REPO, recursive=True)}
    return sorted(found)


def _path_tokens(text: str) -> set[str]:
    """The tokens of `text` that name a repo path, placeholders turned into globs."""
    text = PLACEHOLDER.sub("*", text)
    tokens = set()
    for token in re.split(r"[\s;()\[\]\"'|]+", text):  # no comma: Hydra dirs hold them
        key, eq, value = token.partition("=")
        if eq and "/" not in key:  # --out=figures/x, cache_dir=... : the value is the path
            token = value
        token = re.sub(r"::.*$", "", token)  # a pytest node id: tests/test_x.py::test_y
        token = re.sub(r":[\w-]*$", "", token)  # path:line, path:line-line, path:function
        token = token.rstrip(".:,")
        if token.startswith(TOP_FOLDERS):
            tokens.add(token)
    return tokens


def missing_paths(text: str, root: Path = REPO) -> list[str]:
    """The repo paths the markdown `text` names in code that do not exist under `root`."""
    blocks = FENCE.findall(text)
    named = set().union(*(_path_tokens(span) for span in INLINE.findall(FENCE.sub("", text))),
                        *(_path_tokens(block) for block in blocks))
    return sorted(p for p in named if not glob.glob(p, root_dir=root, recursive=True))


@pytest.mark.parametrize("doc", _docs())
def test_every_path_a_doc_names_exists(doc):
    assert missing_paths((REPO / doc).read_text()) == []


def test_the_check_reports_what_is_not_there(tmp_path):
    (tmp_path / "src" / "methods").mkdir(parents=True)
    (tmp_path / "src" / "methods" / "ppo.py").write_text("")
    (tmp_path / "src" / "methods" / "a=1,b=2").mkdir()
    text = ("`src/methods/<name>.py`, `python src/methods/ppo.py:12`, `src/methods/ppo.py:loss`,\n"
            "`src/methods/{ppo,sapo}.py` and `src/methods/a=1,b=2/` are there, but not\n"
            "`src/nowhere.py`, `src/methods/<x>.yaml`, `run --out=src/gone/` or, in a block,\n"
            "```\npython src/also_gone.py\n```\n")
    assert missing_paths(text, root=tmp_path) == [
        "src/also_gone.py", "src/gone/", "src/methods/*.yaml", "src/nowhere.py"]
    assert len(_docs()) > 10 and "docs/contributing.md" in _docs()
