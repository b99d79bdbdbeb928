"""The lag sweeps' report (analysis/lag_report.py is its command): figures, tables and claim
rows from the lag runs, written into one folder.

Every run must come from one warm-start build (analysis/core/builds.py; the report stops
and names the runs otherwise). One-seed pilots never sit beside the sweeps: a cell with one
seed where the report's cells have more is left out of the sweep tables and figures and
listed apart, and the calibration pilots come in only when asked for, in a figure of their
own. The claims get Holm's correction over the report's tested rows.
"""

from __future__ import annotations

import functools
from functools import partial
from pathlib import Path

import pandas as pd
import yaml

from analysis.claims import verdicts
from analysis.claims.lag import REFERENCE, lag_claims
from analysis.core import style
from analysis.core.builds import build_labels, check_one_warm_start
from analysis.core.lags import lag_summary
from analysis.core.loader import RunSet
from analysis.core.pilots import LAG_CELL, apart_lines, one_seed_cells
from analysis.figures import lag_bapo, lag_corrections, lag_forest, lag_ratios, lag_training
from analysis.figures.contract import Figure, Options, draw_figures
from analysis.figures.lag_common import reference_updates, search_updates
from analysis.reports.lag_sections import cell_table, markdown
from analysis.reports.lag_variants import variant_table
from analysis.reports.markdown import md_table
from src.config_fields import config_exit  # exit 2 and one line, as src/run.py

REPO = Path(__file__).resolve().parents[2]
DEFAULT_RUNS = REPO / "experiments" / "lag_results"
PILOT_FIGURE_PREFIX = "lag_pilot"  # figures of the calibration pilots, kept apart
LAG_FIGURES: tuple[Figure, ...] = (
    Figure("lag_training", lag_training.draw),
    Figure("lag_ratios", lag_ratios.draw),
    Figure("lag_bapo", lag_bapo.draw),
    Figure("lag_forest", lag_forest.draw),
    Figure("lag_corrections", lag_corrections.draw),
)
PILOT_FIGURES: tuple[Figure, ...] = (
    Figure(f"{PILOT_FIGURE_PREFIX}_ratios", partial(
        lag_ratios.draw, name=f"{PILOT_FIGURE_PREFIX}_ratios",
        what=f"one-seed calibration pilots of {REFERENCE}, apart from the sweeps")),
)
CSV_OF_FIGURE = {"lag_bapo": "lag_search", "lag_forest": "lag_paired"}


def write(runs: RunSet, pilots: RunSet | None, opts: Options,
          title: str = "Lag sweeps: where the clip binds") -> Path:
    try:
        warm = check_one_warm_start(runs)
    except ValueError as e:
        config_exit(f"lag report: {e}")
    opts.out.mkdir(parents=True, exist_ok=True)
    style.setup()
    every = lag_summary(runs)
    if every.empty:
        config_exit(f"no usable runs under the given roots ({len(runs.skipped)} skipped); pass "
                    "--runs the folders that hold the lag sweeps' finished runs (default "
                    f"{DEFAULT_RUNS.relative_to(REPO)})")
    apart = one_seed_cells(every, LAG_CELL)  # never beside the sweeps: listed apart
    s = every[~every["run_id"].isin(apart["run_id"])].reset_index(drop=True)
    sweep = runs.subset(lambda r: r.run_id in set(s["run_id"]))
    sweep.memo["lag_summary"] = s  # the figures read the same rows as the tables
    drawn = draw_figures(LAG_FIGURES, sweep, opts, quiet=True)
    chosen = pilot_runs(pilots, warm) if pilots is not None else None
    if chosen is not None:  # the calibration pilots: a figure of their own, never the sweeps'
        pilot = draw_figures(PILOT_FIGURES, chosen, opts, quiet=True)
        drawn.made += pilot.made
        drawn.skipped += pilot.skipped
    claims = verdicts.table(lag_claims(s, search_updates(sweep)))
    variants = variant_table(s, {r.method: r.method_name for r in runs.runs})
    _write_csvs(opts.out, every, apart, claims, variants, drawn.made)
    tasks = ", ".join(sorted({task_label(r.config.get("task") or {}) for r in runs.runs}))
    text = markdown(s, claims, drawn, warm, reference_updates(sweep), title, tasks, variants)
    text += apart_lines(apart, cell_table, md_table)
    path = opts.out / "REPORT.md"
    path.write_text(text)
    return path


def _write_csvs(out: Path, every: pd.DataFrame, apart: pd.DataFrame, claims: pd.DataFrame,
                variants: pd.DataFrame, made: list) -> None:
    every.assign(apart_from_sweeps=every["run_id"].isin(apart["run_id"])).to_csv(
        out / "lag_summary.csv", index=False)
    claims.to_csv(out / "lag_claims.csv", index=False)
    if not variants.empty:
        variants.to_csv(out / "lag_variants.csv", index=False)
    for f in made:
        if f.name in CSV_OF_FIGURE:
            f.data.to_csv(out / f"{CSV_OF_FIGURE[f.name]}.csv", index=False)


def task_label(task: dict) -> str:
    """The task's name and the params it changes from conf/task/<name>.yaml (the ramble
    testbed is `guess_check` with ramble_fraction 0.3; its name alone would hide that)."""
    name = str(task.get("name", "arithmetic"))
    base = _task_yaml_params(name)
    changed = {k: v for k, v in sorted((task.get("params") or {}).items()) if base.get(k) != v}
    return f"`{name}`" + (f" ({', '.join(f'{k} {v}' for k, v in changed.items())})" if changed else "")


@functools.cache
def _task_yaml_params(name: str) -> dict:
    """conf/task/<name>.yaml's params, read once per task (a report labels hundreds of runs)."""
    default = REPO / "conf" / "task" / f"{name}.yaml"
    return (yaml.safe_load(default.read_text()) or {}).get("params", {}) if default.is_file() else {}


def pilot_runs(pilots: RunSet, build: str) -> RunSet | None:
    """The pilots of the report's warm-start build (another build's accuracy is not the
    sweeps'); None when none is."""
    labels = build_labels(pilots)
    chosen = pilots.subset(lambda r: labels.get(r.run_id) == build)
    return chosen if chosen.runs else None
