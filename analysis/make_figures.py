"""Regenerate every figure and figures/REPORT.md from run dirs.

python analysis/make_figures.py [--runs DIR ...] [--out DIR]
python -m analysis.make_figures --runs runs experiments/results --out figures
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `analysis` importable from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis import fig_bounds, fig_final, fig_tokens, fig_training, style  # noqa: E402
from analysis.loader import RunSet, load_runs  # noqa: E402
from analysis.plotting import FigureResult, Options, SkipFigure  # noqa: E402
from analysis.report import write_report  # noqa: E402
from analysis.summary import run_summary  # noqa: E402

FIGURES: dict[str, Callable[[RunSet, Options], FigureResult]] = {
    "fig02_staleness_ppo": fig_training.fig02_staleness,
    "fig04_contribution_by_sign": fig_training.fig04_contribution,
    "fig05_prob_by_is_weight": fig_tokens.fig05_prob_by_ratio,
    "fig06_length_by_sign": fig_training.fig06_length,
    "fig07_asymmetric_clips": fig_training.fig07_asymmetric,
    "fig08_bapo_bounds": fig_bounds.fig08_bapo_bounds,
    "fig09_bapo_vs_ppo": fig_training.fig09_bapo_vs_ppo,
    "fig10_prob_is_entropy": fig_tokens.fig10_prob_ratio_entropy,
    "fig11_final_accuracy": fig_final.fig11_final_accuracy,
    "fig_entropy_quadrants": fig_tokens.fig_entropy_quadrants,
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", nargs="+", default=["runs"], help="dirs searched for run dirs")
    p.add_argument("--out", default="figures", help="output dir (figures + REPORT.md)")
    p.add_argument("--formats", nargs="+", default=["png", "pdf"])
    p.add_argument("--dpi", type=int, default=150)
    p.add_argument("--experiment", nargs="+", help="only runs of these experiment names")
    p.add_argument("--only", nargs="+", help="only figures whose name starts with these")
    p.add_argument("--last-k", type=int, default=5, help="steps averaged as 'final'")
    p.add_argument("--smooth", type=int, default=1, help="rolling window over steps")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
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
        print("nothing to plot: no usable run dirs (config.yaml + metrics.jsonl)")
        return 1
    style.setup()
    opts = Options(
        out=Path(args.out),
        formats=tuple(args.formats),
        dpi=args.dpi,
        smooth=args.smooth,
        last_k=args.last_k,
    )
    made, skipped, failed = [], [], []
    for name, fn in FIGURES.items():
        if args.only and not any(name.startswith(o) for o in args.only):
            continue
        t = time.perf_counter()
        try:
            res = fn(runs, opts)
        except SkipFigure as e:
            skipped.append((name, str(e)))
            print(f"skipped {name}: {e}")
            continue
        except Exception as e:  # noqa: BLE001 - one broken figure must not cost the others
            failed.append((name, f"failed: {type(e).__name__}: {e}"))
            print(f"FAILED  {name}: {type(e).__name__}: {e}")
            continue
        made.append(name)
        print(f"made    {', '.join(str(p) for p in res.paths)} ({time.perf_counter() - t:.1f}s)")
    summary = run_summary(runs, args.last_k)
    path, _, claims = write_report(
        runs, summary, opts.out, args.runs, made, skipped + failed, args.last_k
    )
    print(
        f"made    {path} ({(claims['verdict'] == 'held').sum()} of {len(claims)} claims held, "
        f"{(claims['verdict'] == 'no data').sum()} without data)"
    )
    for m in runs.messages:
        print(f"  note: {m}")
    print(f"done in {time.perf_counter() - t0:.1f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
