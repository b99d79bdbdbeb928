"""The command line of a sweep's report (the mismatch grid's, the clip family's): the roots
to read, the dir to write, a title; a missing root or a report with no runs exits 2 with one
`config error:` line, before anything is written, as `python -m src.run` does."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from analysis.figures.contract import SkipFigure
from src.config_fields import config_exit


def run_report_cli(argv: list[str] | None, *, description: str,
                   write_report: Callable[[list[Path], Path, str], pd.DataFrame],
                   runs: list[Path], out: Path, title: str) -> int:
    """Parse `argv`, check the roots, write the report; 0 when written."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--runs", nargs="+", type=Path, default=runs)
    parser.add_argument("--out", type=Path, default=out)
    parser.add_argument("--title", default=title)
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.runs if not p.is_dir()]
    if missing:
        config_exit(f"--runs: no such folder {', '.join(missing)}")
    try:
        claims = write_report(list(args.runs), args.out, args.title)
    except SkipFigure as e:
        config_exit(f"--runs: {e}")
    print(f"wrote {args.out / 'REPORT.md'} ({len(claims)} claims)")
    return 0
