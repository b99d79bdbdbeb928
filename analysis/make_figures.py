"""Regenerate every figure and REPORT.md from run dirs.

python analysis/make_figures.py [--runs DIR ...] [--out DIR]      # runs/ -> outputs/figures/
python analysis/make_figures.py --runs experiments/results --out figures \
    --docs docs/reproduction.md                                          # the committed ones

Runs are grouped into cells (one experiment, method and config; only seeds pooled) and
suites (cells that can be compared, analysis/core/cells.py). The largest suite's figures go to
--out, every other suite's to --out/suites/<name>/; REPORT.md covers them all. The files
this tool manages in --out are replaced as a whole, never mixed with older ones.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import NoReturn

import pandas as pd
from matplotlib.backend_bases import FigureCanvasBase

if __package__ in (None, ""):  # run as a script: make `analysis` importable from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.core import style  # noqa: E402
from analysis.core.loader import load_runs  # noqa: E402
from analysis.core.pilots import one_seed_cells  # noqa: E402
from analysis.core.summary import run_summary  # noqa: E402
from analysis.figures import bound_hist as fig_bound_hist  # noqa: E402
from analysis.figures import bounds as fig_bounds  # noqa: E402
from analysis.figures import entropy_law as fig_entropy_law  # noqa: E402
from analysis.figures import eval_steps as fig_eval_steps  # noqa: E402
from analysis.figures import final as fig_final  # noqa: E402
from analysis.figures import prob_tail  # noqa: E402
from analysis.figures import quadrants as fig_quadrants  # noqa: E402
from analysis.figures import ratio as fig_ratio  # noqa: E402
from analysis.figures import rho as fig_rho  # noqa: E402
from analysis.figures import tokens as fig_tokens  # noqa: E402
from analysis.figures import training as fig_training  # noqa: E402
from analysis.figures.contract import Figure, Options, draw_figures  # noqa: E402
from analysis.reports.doc_blocks import fill_docs  # noqa: E402
from analysis.reports.markdown import verdict_counts  # noqa: E402
from analysis.reports.paper import CELL_COLS, SuiteFigures, write_report  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FIGURES: tuple[Figure, ...] = (
    Figure("fig02_staleness_ppo", fig_training.fig02_staleness),
    Figure("fig04_contribution_by_sign", fig_training.fig04_contribution),
    Figure("fig05_prob_by_is_weight", prob_tail.fig05_prob_by_ratio),
    Figure("fig06_length_by_sign", fig_training.fig06_length),
    Figure("fig07_asymmetric_clips", fig_training.fig07_asymmetric),
    Figure("fig08_bapo_bounds", fig_bounds.fig08_bapo_bounds),
    Figure("fig_bapo_rho_before", fig_rho.fig_bapo_rho_before),
    Figure("fig_bapo_bound_hist", fig_bound_hist.fig_bapo_bound_hist),
    Figure("fig09_bapo_vs_ppo", fig_training.fig09_bapo_vs_ppo),
    Figure("fig10_prob_is_entropy", fig_tokens.fig10_prob_ratio_entropy),
    Figure("fig11_final_accuracy", fig_final.fig11_final_accuracy),
    Figure("fig_accuracy_by_step", fig_eval_steps.fig_accuracy_by_step),
    Figure("fig_entropy_quadrants", fig_quadrants.fig_entropy_quadrants),
    Figure("fig_is_ratio_by_staleness", fig_ratio.fig_is_ratio_by_staleness),
    Figure("fig_entropy_law", fig_entropy_law.fig_entropy_law),
)


TEXT_OUTPUTS = ("REPORT.md", "results.csv", "claims.csv", "claim_counts.csv", "runs.csv",
                "bapo_search.csv", "batch_claims.csv")
SUITES_DIR = "suites"  # figures of every suite but the largest, one dir each
EXIT_USAGE = 2  # a bad option, nothing to read or nowhere to write: the command line is at fault
FORMATS = sorted(FigureCanvasBase.get_supported_filetypes())  # what matplotlib can write


def positive_int(text: str) -> int:
    """An argparse type: a whole number > 0 (a dpi, a step count, a window)."""
    if not (text.isdigit() and int(text) > 0):
        raise argparse.ArgumentTypeError(f"must be a whole number > 0, got {text!r}")
    return int(text)


class OneLineParser(argparse.ArgumentParser):
    """Bad options end the command with one line naming the option and what it takes, exit 2,
    before any run is read or any file written."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {message}\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", nargs="+", default=["runs"], help="dirs searched for run dirs")
    p.add_argument(
        "--out",
        default="outputs/figures",
        help="output dir (figures + REPORT.md); the committed figures are made with "
        "--runs experiments/results --out figures",
    )
    p.add_argument("--formats", nargs="+", default=["png", "pdf"], choices=FORMATS,
                   metavar="FORMAT", help=f"one or more of: {', '.join(FORMATS)}")
    p.add_argument("--dpi", type=positive_int, default=150)
    p.add_argument("--experiment", nargs="+", help="only runs of these experiment names")
    p.add_argument("--only", nargs="+", help="only figures whose name starts with these")
    p.add_argument("--last-k", type=positive_int, default=5, help="steps averaged as 'final'")
    p.add_argument("--smooth", type=positive_int, default=1, help="rolling window over steps")
    p.add_argument("--docs", nargs="*", default=[], type=Path,
                   help="docs whose generated blocks naming --out are refilled from the new "
                   "report (analysis/reports/doc_blocks.py), e.g. docs/reproduction.md")
    return p.parse_args(argv)


def managed(out: Path) -> list[Path]:
    """What this tool writes into `out`, from any earlier call: removed before new files go
    in, so no stale figure sits beside new ones. Nothing else in `out` is touched."""
    if not out.is_dir():
        return []
    found = [out / n for n in TEXT_OUTPUTS if (out / n).exists()]
    found += [p for f in FIGURES for p in sorted(out.glob(f"{f.name}.*")) if p.is_file()]
    if (out / SUITES_DIR).is_dir():
        found.append(out / SUITES_DIR)
    return found


def swap_in(staged: Path, out: Path) -> None:
    """Replace the managed files in `out` with everything in `staged`, then drop `staged`."""
    out.mkdir(parents=True, exist_ok=True)
    for old in managed(out):
        shutil.rmtree(old) if old.is_dir() else old.unlink()
    for new in sorted(staged.iterdir()):
        os.replace(new, out / new.name)
    staged.rmdir()


def out_problem(out: Path) -> str | None:
    """Why `out` cannot be the output dir (a file, or a file on its path), else None."""
    for p in (out, *out.parents):
        if p.exists():
            return None if p.is_dir() else f"--out {out}: {p} is a file, not a dir"
    return None


def claim_count_lines(claims: pd.DataFrame) -> list[str]:
    """One suite's verdict counts before and after Holm's correction, each line saying which
    (REPORT.md quotes both; the after-Holm count is the one that controls the error rate)."""
    tests = int(claims["tests"].iat[0]) if len(claims) else 0
    after = verdict_counts(claims, "holm_verdict")
    return [f"before Holm: {verdict_counts(claims)}",
            f"after Holm over the suite's {tests} tested rows: {after}"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    problem = out_problem(Path(args.out))
    if problem:
        print(f"error: {problem}; give a dir (made if missing)", file=sys.stderr)
        return EXIT_USAGE
    runs = load_runs(args.runs)
    if args.experiment:
        runs = runs.subset(lambda r: r.experiment in set(args.experiment))
    print(
        f"read {len(runs.runs)} runs from {', '.join(args.runs)} "
        f"({len(runs.skipped)} skipped) in {time.perf_counter() - t0:.1f}s"
    )
    if not runs.runs:
        for m in runs.messages:
            print(f"  note: {m}")
        print("nothing to plot: no usable run dirs "
              "(config.yaml + metrics.jsonl or metrics.jsonl.gz)")
        return EXIT_USAGE
    style.setup()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Everything is drawn into a fresh dir beside `out` and swapped in at the end: a crash
    # leaves `out` as it was, and a rerun never mixes old files with new ones.
    staged = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        figures, failed = [], []
        summary = run_summary(runs, args.last_k)
        # one-seed cells beside a suite's multi-seed ones: in no figure (listed apart)
        apart = set(one_seed_cells(summary, CELL_COLS, within="suite")["run_id"])
        for i, suite in enumerate(runs.suites):
            part = runs.subset(lambda r, suite=suite: r.suite == suite and r.run_id not in apart)
            where = "." if i == 0 else f"{SUITES_DIR}/{part.runs[0].suite_slug}"
            print(f"suite {suite} ({len(part.runs)} runs) -> {out / where}")
            opts = Options(out=staged / where, formats=tuple(args.formats), dpi=args.dpi,
                           smooth=args.smooth, last_k=args.last_k)
            drawn = draw_figures(FIGURES, part, opts, args.only)
            figures.append(SuiteFigures(suite, where, [f.name for f in drawn.made],
                                        drawn.skipped + drawn.failed))
            failed += drawn.failed
        _, _, claims = write_report(runs, summary, staged, args.runs, figures, args.last_k)
        swap_in(staged, out)
        for doc in fill_docs(args.docs, REPO, only=out):
            print(f"filled  {doc}")
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    for suite in runs.suites:
        print(f"claims of suite {suite}:", *claim_count_lines(claims[claims["suite"] == suite]),
              sep="\n  ")
    print(f"made    {out / 'REPORT.md'}, results.csv, claims.csv, claim_counts.csv, runs.csv")
    for m in runs.messages:
        print(f"  note: {m}")
    print(f"done in {time.perf_counter() - t0:.1f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
