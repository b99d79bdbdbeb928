"""analysis/ is one package of small parts: scripts at the top, core/, claims/, figures/,
reports/; no module over 300 lines and no function over 60; one figure contract, taken
alike by make_figures.py and lag_report.py."""

from __future__ import annotations

import ast
from pathlib import Path

from analysis import make_figures
from analysis.figures.contract import Figure
from analysis.reports import lag

ANALYSIS = Path(__file__).resolve().parents[2] / "analysis"
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 300, 60
# one script per report family; the mismatch grid's report compares sampler settings, which
# neither the paper's suites nor the lags have; the clip family's pairs two experiments'
# sweeps with the committed references of both
SCRIPTS = {"__init__.py", "make_figures.py", "lag_report.py", "token_view.py", "mismatch_report.py",
           "clip_family_report.py", "microscope_report.py"}
PACKAGES = {"core", "claims", "figures", "reports"}


def too_long(source: str) -> list[tuple[str, int]]:
    """(name, lines) of every function of `source` longer than MAX_FUNCTION_LINES."""
    return [(f.name, f.end_lineno - f.lineno + 1) for f in ast.walk(ast.parse(source))
            if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
            and f.end_lineno - f.lineno + 1 > MAX_FUNCTION_LINES]


def test_the_length_check_sees_a_long_function():
    body = "".join(f"    x{i} = {i}\n" for i in range(60))  # 60 lines + the def line
    assert too_long(f"def f():\n{body}") == [("f", 61)]
    assert too_long(f"def f():\n{body[:-len('    x59 = 59')-1]}") == []


def test_the_layout_is_scripts_and_four_packages():
    assert {p.name for p in ANALYSIS.glob("*.py")} == SCRIPTS
    assert {p.name for p in ANALYSIS.iterdir() if p.is_dir() and p.name != "__pycache__"} \
        == PACKAGES
    assert all((ANALYSIS / pkg / "__init__.py").is_file() for pkg in PACKAGES)


def test_no_module_over_300_lines_and_no_function_over_60():
    modules = sorted(ANALYSIS.rglob("*.py"))
    long_modules = {str(p.relative_to(ANALYSIS)): n for p in modules
                    if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    long_functions = {str(p.relative_to(ANALYSIS)): f for p in modules
                      if (f := too_long(p.read_text()))}
    assert long_modules == {} and long_functions == {}


def test_make_figures_and_lag_report_take_the_same_kind_of_figure():
    for figures in (make_figures.FIGURES, lag.LAG_FIGURES, lag.PILOT_FIGURES):
        assert figures and all(isinstance(f, Figure) and callable(f.draw) for f in figures)
    names = [f.name for f in (*make_figures.FIGURES, *lag.LAG_FIGURES)]
    assert len(names) == len(set(names))
