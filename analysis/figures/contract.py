"""The one contract every figure keeps, so that analysis/make_figures.py and
analysis/lag_report.py take the same kind of figure.

A figure is a `Figure(name, draw)`: `draw(runs: RunSet, opts: Options) -> FigureResult`
reads what it needs from the runs (a lag figure its lags from them, a token figure their
token rows), raises `SkipFigure` naming the runs it needs when they are absent, writes its
files with `save(fig, name, opts)`, and returns exactly what it drew (`FigureResult.data`).
Which runs it compares it reads from the runs' method traits or from the claim rows
(analysis/claims/), never from method names of its own. `draw_figures` draws a list of
them, and one figure that fails costs only itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from analysis.core import style
from analysis.core.loader import RunSet


class SkipFigure(Exception):
    """The runs a figure needs are not there; the message says which."""


@dataclass
class Options:
    out: Path = Path("figures")
    formats: tuple[str, ...] = ("png", "pdf")
    dpi: int = 150
    smooth: int = 1  # rolling mean over steps, per run, before averaging seeds
    last_k: int = 5  # "final" = mean of the last k steps
    scatter_rows: int = 1500  # token rows per run drawn in scatter plots
    box_rows: int = 50_000  # token rows per run feeding box plots


@dataclass
class FigureResult:
    name: str
    paths: list[Path]
    data: pd.DataFrame  # exactly what was plotted
    extra: dict[str, pd.DataFrame] = field(default_factory=dict)


Draw = Callable[[RunSet, Options], FigureResult]


@dataclass(frozen=True)
class Figure:
    """A named figure: what `draw` makes from a RunSet under Options."""

    name: str
    draw: Draw


def save(fig: plt.Figure, name: str, opts: Options) -> list[Path]:
    return style.save(fig, opts.out, name, opts.formats, opts.dpi)


def require(cond: bool, reason: str) -> None:
    if not cond:
        raise SkipFigure(reason)


def require_learning(runs: RunSet) -> None:
    """Skip a figure about learning (accuracy, reward, contribution by sign, length by sign)
    when every reward is a coin flip: there is nothing to learn, so it would only show noise."""
    require(not runs.runs or any(r.cfg("task.reward") != "random" for r in runs.runs),
            "random rewards (task.reward=random): nothing to learn, so this figure would "
            "show only coin-flip noise")


@dataclass
class Drawn:
    """What `draw_figures` made: the results, and (name, reason) of the skipped and failed."""

    made: list[FigureResult] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)


def draw_figures(figures: Sequence[Figure], runs: RunSet, opts: Options,
                 only: Iterable[str] | None = None, quiet: bool = False) -> Drawn:
    """Draw each figure (those whose name starts with one of `only`, when given)."""
    out, only = Drawn(), list(only or [])
    for figure in figures:
        if only and not any(figure.name.startswith(o) for o in only):
            continue
        t = time.perf_counter()
        try:
            res = figure.draw(runs, opts)
        except SkipFigure as e:
            out.skipped.append((figure.name, str(e)))
            _say(quiet, f"skipped {figure.name}: {e}")
            continue
        except Exception as e:  # noqa: BLE001 - one broken figure must not cost the others
            out.failed.append((figure.name, f"failed: {type(e).__name__}: {e}"))
            _say(quiet, f"FAILED  {figure.name}: {type(e).__name__}: {e}")
            continue
        if res.name != figure.name:  # the contract: a figure's files are named as it is
            out.failed.append((figure.name, f"failed: drew {res.name!r}, not {figure.name!r}"))
            continue
        out.made.append(res)
        _say(quiet, f"made    {', '.join(p.name for p in res.paths)} "
                    f"({time.perf_counter() - t:.1f}s)")
    return out


def _say(quiet: bool, text: str) -> None:
    if not quiet:
        print(text)
