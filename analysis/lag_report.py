"""The lag sweeps' report: figures, tables and claim rows from the lag runs.

    python analysis/lag_report.py                         # experiments/lag_results -> figures/lag
    python analysis/lag_report.py --runs experiments/lag_results_large --out figures/lag_large \
        --title "Lag sweeps at 64-259 updates, replay and partial rollouts (warm-start build 4eb7f2706392ef39)"
    python analysis/lag_report.py --runs experiments/lag_results_guess --out figures/lag_guess \
        --title "Guess and check at 16-19 updates (warm-start build of guess_check)"
    python analysis/lag_report.py --runs runs --out /tmp/lag

Reads the lag sweeps' runs (experiments/sweeps.yaml: lag4, lag16, lag64, corrections,
large_lag, large_lag_peers, scenarios, start_bounds). Every run must come from one
warm-start build, told apart by the weights digest in meta.json or, for runs without one,
by the step-0 greedy accuracy (analysis/core/lags.py; the report stops and names the runs
otherwise), so runs made on another machine, or on another task, go to a root and a report
of their own. One-seed pilots never sit beside the sweeps: a cell with one seed where the
report's cells have more is left out of the sweep tables and figures and listed apart, and
the calibration pilots (experiments/calibration/runs/L*) come in only with `--pilots`, in a
figure of their own (lag_pilot_ratios.png). Writes <out>/{lag_*.png, REPORT.md,
lag_summary.csv, lag_claims.csv, lag_search.csv, lag_paired.csv} and, where a method also
ran with other parameters (an ablation such as `start_bounds`), lag_variants.csv (default
figures/lag/). Final accuracy is the mean of a run's last three evals (analysis/core/final.py);
the claims get Holm's correction over the report's tested rows (analysis/core/multiplicity.py).

Exit code 0 when the report is written; 2 with one `config error:` line, as `python -m
src.run`, for bad input: a --runs folder that does not exist, no usable run under the
roots, or runs of more than one warm-start build.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # `python analysis/lag_report.py` puts only analysis/ there
    sys.path.insert(0, str(REPO))

from analysis.claims.lag import lag_claims  # noqa: E402
from analysis.core import style  # noqa: E402
from analysis.core.final import FINAL_EVALS  # noqa: E402
from analysis.core.lags import (  # noqa: E402
    build_labels,
    check_one_warm_start,
    lag_summary,
    lag_table,
    steady_updates,
)
from analysis.core.loader import RunSet, load_runs  # noqa: E402
from analysis.core.multiplicity import fmt_holm, with_holm  # noqa: E402
from analysis.core.pilots import LAG_CELL, apart_lines, one_seed_cells  # noqa: E402
from analysis.core.plotting import Options, SkipFigure  # noqa: E402
from analysis.core.search_ceiling import annotate  # noqa: E402
from analysis.core.search_outcomes import searches_bounds  # noqa: E402
from analysis.core.stats import fmt_ci  # noqa: E402
from analysis.figures.lag import (  # noqa: E402
    corrections_table,
    fig_lag_bapo,
    fig_lag_corrections,
    fig_lag_forest,
    fig_lag_ratios,
    fig_lag_training,
    lag_order,
    outside_clip,
    ratio_shares,
)
from analysis.reports.lag_variants import variant_table  # noqa: E402
from analysis.reports.paper import holm_counts, md_table, verdict_counts  # noqa: E402
from src.config_fields import config_exit  # noqa: E402 - exit 2 and one line, as src/run.py

DEFAULT_RUNS = REPO / "experiments" / "lag_results"
CALIBRATION_PILOTS = sorted((REPO / "experiments" / "calibration" / "runs").glob("L[0-9]*"))
PILOT_FIGURE_PREFIX = "lag_pilot"  # figures of the calibration pilots, kept apart
CELL_COLS = {
    "final_greedy_acc": "final greedy", "final_sampled_acc": "final sampled",
    "entropy_drift": "entropy drift", "steady_clip_frac": "clip frac",
    "steady_abs_log_r": "mean abs log r", "steady_rho_before": "rho before search",
    "steady_grad_clipped": "grad-norm clipped",
    # BAPO acts only when negative tokens carry > 1 - rho0 of the gradient; within a group
    # the advantages cancel, so what tips the share is failing responses being longer
    "length_pos": "length A>0", "length_neg": "length A<0",
}


def ppo_by_lag(runs: RunSet) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Step records and lags of the coupled ppo runs with a config lag."""
    t = lag_table(runs)
    lags = t[(t["method"] == style.BASELINE) & (t["anchor"] == "coupled")
             & t["source"].isin(["fresh", "delay"])]
    return runs.steps[runs.steps["run_id"].isin(lags["run_id"])], lags.reset_index(drop=True)


def bapo_updates(runs: RunSet) -> pd.DataFrame:
    """Steady updates of the runs whose method searches its bounds, with `rho0` (the
    parameter its traits name as the target) and how each search ended against its ceiling
    (search_ceiling.annotate)."""
    # the steady updates of every run, then the searching ones: a replay or partial cell's
    # lag label pools all its runs (lag_runs._measured_lags), so it matches the cell tables
    rho0 = {r.run_id: r.method_param(r.traits.target) for r in runs.select(searches_bounds)}
    u = steady_updates(runs)
    u = u[u["run_id"].isin(rho0)] if not u.empty else u
    return u if u.empty else annotate(u.assign(rho0=u["run_id"].map(rho0)), runs)


def cell_table(s: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds per (lag, anchor, method), with the seed count and where the final
    evals fall (steps, and optimizer updates, which differ between lags)."""
    g = s.groupby(["lag_low", "lag", "anchor", "method"], sort=True)
    out = g[[c for c in CELL_COLS if c in s]].mean().round(4)
    out.insert(0, "seeds", g.size())
    if {"final_eval_steps", "final_updates"} <= set(s.columns):
        out.insert(1, "final evals: steps (updates)", g.apply(
            lambda c: "; ".join(sorted({f"{a} ({b})" for a, b in zip(
                c["final_eval_steps"], c["final_updates"], strict=True) if a == a}))))
    return out.reset_index().drop(columns="lag_low").rename(columns=CELL_COLS)


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
    steps, lags = ppo_by_lag(sweep)
    ppo_updates = steady_updates(sweep.subset(lambda r: r.run_id in set(lags["run_id"])))
    bapo = bapo_updates(sweep)
    figures, skipped = [], []
    makers = [lambda: fig_lag_training(steps, lags, opts),
              lambda: fig_lag_ratios(ppo_updates, opts),
              lambda: fig_lag_bapo(bapo, opts),
              lambda: fig_lag_forest(s[s["anchor"] == "coupled"], opts),
              lambda: fig_lag_corrections(s, opts, _on_policy(s))]
    chosen = pilot_runs(pilots, warm) if pilots is not None else None
    if chosen is not None:  # the calibration pilots: a figure of their own, never the sweeps'
        pilot_updates = steady_updates(chosen.subset(lambda r: r.method == style.BASELINE))
        makers.append(lambda: fig_lag_ratios(
            pilot_updates, opts, name=f"{PILOT_FIGURE_PREFIX}_ratios",
            what="one-seed calibration pilots of ppo, apart from the sweeps"))
    for make in makers:
        try:
            figures.append(make())
        except SkipFigure as e:
            skipped.append(str(e))
    claims = with_holm(lag_claims(s, bapo))
    variants = variant_table(s, {r.method: r.method_name for r in runs.runs})
    every.assign(apart_from_sweeps=every["run_id"].isin(apart["run_id"])).to_csv(
        opts.out / "lag_summary.csv", index=False)
    claims.to_csv(opts.out / "lag_claims.csv", index=False)
    if not variants.empty:
        variants.to_csv(opts.out / "lag_variants.csv", index=False)
    for f in figures:
        if f.name in ("lag_bapo", "lag_forest"):
            name = {"lag_bapo": "lag_search", "lag_forest": "lag_paired"}[f.name]
            f.data.to_csv(opts.out / f"{name}.csv", index=False)
    tasks = ", ".join(sorted({task_label(r.config.get("task") or {}) for r in runs.runs}))
    text = _markdown(s, claims, figures, skipped, warm, ppo_updates, title, tasks, variants)
    text += apart_lines(apart, cell_table, md_table)
    path = opts.out / "REPORT.md"
    path.write_text(text)
    return path


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


def positive_share_by_lag(updates: pd.DataFrame) -> pd.DataFrame:
    """Per lag: runs, updates, mean rho and the share of updates with rho < 0.4."""
    rho = pd.to_numeric(updates["rho"], errors="coerce")
    g = updates.assign(rho=rho, below=(rho < 0.4).astype(float)).groupby("lag", sort=False)
    return pd.DataFrame({"runs": g["run_id"].nunique(), "updates": g.size(),
                         "mean rho": g["rho"].mean().round(3),
                         "rho < 0.4": g["below"].mean().round(3)})


def _on_policy(s: pd.DataFrame) -> float | None:
    on = s[(s["method"] == style.BASELINE) & (s["lag"] == "0") & (s["anchor"] == "coupled")]
    return float(on["final_greedy_acc"].mean()) if len(on) else None


def _markdown(s, claims, figures, skipped, warm, ppo_updates, title: str, tasks: str,
              variants: pd.DataFrame) -> str:
    shown = claims.assign(**{"after Holm": claims.apply(fmt_holm, axis=1)})[
        ["claim", "paper", "measured", "verdict", "after Holm", "note"]]
    lines = [
        f"# {title}",
        "",
        "Written by `python analysis/lag_report.py` from the lag sweeps' runs "
        f"(task {tasks}; warm start `{warm}`; every run shares it). Lags are in optimizer updates; a delay "
        "queue's first steps train on the initial weights' rollouts and are left out of the "
        "steady numbers. Final accuracy is the mean of each run's last "
        f"{FINAL_EVALS} evals; cells at one lag have them at the same updates, and a "
        "comparison across lags says in its note how it is aligned. Comparisons are paired "
        "by seed: held only when the paired 95% t-interval excludes 0 in the stated "
        "direction; seeds that all gave one value have no interval. `after Holm`: the verdict "
        "that survives Holm's correction over this table's tested rows (two-sided t-test p, "
        "Holm-adjusted p, number of tests); a settled verdict whose adjusted p is not below "
        "0.05 becomes `not settled`. The search row is a count over pooled updates "
        "(Wilson intervals), not a test.",
        "",
        f"## Claims ({verdict_counts(claims)})",
        "",
        holm_counts(claims),
        "",
        md_table(shown.fillna("—")),
        "",
        "## Cells (mean over seeds)",
        "",
        f"final = mean of the last {FINAL_EVALS} evals on 256 held-out problems (their steps "
        "and optimizer updates in the second column: a delay queue's warm-up steps count, so "
        "lags differ in updates at equal steps on their own rollouts); entropy drift = mean "
        "of the last 5 steps "
        "minus the first 5 (negative: fell); clip frac, mean abs log r, rho before search and "
        "grad-norm clipped over the steady updates; lengths in tokens of the responses with "
        "positive and negative advantage.",
        "",
        md_table(cell_table(s).astype(object).fillna("—")),
        "",
    ]
    if not variants.empty:
        lines += ["## Parameter variants (paired by seed)", "",
                  "A variant runs a method with parameters other than its yaml's; it is "
                  "compared with the method's own runs and with ppo at the same lag, seed by "
                  "seed (mean ± 95% t-interval half-width; seeds with a difference > 0).", "",
                  md_table(variants.astype(object).fillna("—")), ""]
    shares = ratio_shares(ppo_updates) if not ppo_updates.empty else pd.DataFrame()
    if not shares.empty:
        order = lag_order(shares["lag"], shares["lag_low"])
        off = outside_clip(shares).unstack("sign").reindex(order).round(4)
        off.columns = [f"outside, {c}" for c in off.columns]
        share = positive_share_by_lag(ppo_updates).reindex(order)
        table = off.join(share).reset_index()
        lines += ["## ppo by lag: ratios outside [0.8, 1.2] and the positive share", "",
                  "Steady updates; `rho` is the positive share of the gradient at [0.8, 1.2] "
                  "(ppo logs it as BAPO would see it before any search), one value per "
                  "mini-batch update; `rho < 0.4` the share of updates where BAPO's search "
                  "would start.", "",
                  md_table(table.astype(object).fillna("—")), ""]
    corr = corrections_table(s)
    if corr["anchor"].nunique() > 1 if not corr.empty else False:
        order = lag_order(corr["lag"], corr["lag_low"])
        cell = corr.assign(text=[fmt_ci(m, lo, hi, n) for m, lo, hi, n in
                                 corr[["mean", "low", "high", "n"]].itertuples(index=False)])
        wide = cell.pivot(index="anchor", columns="lag", values="text").reindex(columns=order)
        lines += ["## ppo's ratio anchor against the lag (final greedy accuracy)", "",
                  "AReaL's Table 3 layout: coupled is the naive ratio to the behaviour policy, "
                  "recompute the ratio to the step-start policy, decoupled AReaL's objective.",
                  "", md_table(wide.reset_index().astype(object).fillna("—")), ""]
    sweeps = [f for f in figures if not f.name.startswith(PILOT_FIGURE_PREFIX)]
    lines += ["## Figures", ""]
    lines += [f"![{f.name}]({f.name}.png)" for f in sweeps]
    lines += [f"- skipped: {why}" for why in skipped]
    pilots = [f for f in figures if f.name.startswith(PILOT_FIGURE_PREFIX)]
    if pilots:
        lines += ["", "## One-seed calibration pilots, apart from the sweeps", "",
                  "ppo pilots of this build (`--pilots`), one seed each: what chose the lags, "
                  "not a result beside the sweeps.", "",
                  *[f"![{f.name}]({f.name}.png)" for f in pilots]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", nargs="+", type=Path, default=[DEFAULT_RUNS])
    p.add_argument("--pilots", nargs="*", default=None,
                   help="one-seed pilot run dirs, drawn in a figure of their own "
                        "(lag_pilot_ratios.png), never in the sweeps' ('calibration': "
                        "experiments/calibration/runs/L*; default and 'none': left out)")
    p.add_argument("--out", type=Path, default=REPO / "figures" / "lag")
    p.add_argument("--formats", nargs="+", default=["png"])
    p.add_argument("--title", default="Lag sweeps: where the clip binds",
                   help="the report's heading (one report per root: say what the root holds)")
    args = p.parse_args(argv)
    missing = [str(r) for r in args.runs if not r.exists()]
    if missing:
        config_exit(f"--runs: no such folder: {', '.join(missing)}")
    pilot_dirs = ([] if args.pilots in (None, ["none"]) else
                  CALIBRATION_PILOTS if args.pilots == ["calibration"] else
                  [Path(x) for x in args.pilots])
    runs = load_runs(args.runs)
    unfinished = [r.run_id for r in runs.runs if r.status != "finished"]
    if unfinished:  # a running run's last eval is not its final one
        print(f"left out {len(unfinished)} unfinished run(s): {', '.join(unfinished)}")
        runs = runs.subset(lambda r: r.status == "finished")
    pilots = load_runs(pilot_dirs) if pilot_dirs else None
    try:
        path = write(runs, pilots, Options(out=args.out, formats=tuple(args.formats)), args.title)
    except ValueError as e:
        raise SystemExit(f"lag report: {e}") from None
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
