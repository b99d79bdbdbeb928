"""The lag sweeps' report: figures, tables and claim rows from the lag runs.

    python analysis/lag_report.py                         # experiments/lag_results -> figures/lag
    python analysis/lag_report.py --runs experiments/lag_results_large --out figures/lag_large \
        --title "Lag sweeps at 64-259 updates, replay and partial rollouts (warm-start build 4eb7f2706392ef39)"
    python analysis/lag_report.py --runs experiments/lag_results_guess --out figures/lag_guess \
        --pilots none --title "Guess and check at 16-19 updates (warm-start build of guess_check)"
    python analysis/lag_report.py --runs runs --out /tmp/lag --pilots none

Reads the lag sweeps' runs (experiments/sweeps.yaml: lag4, lag16, lag64, corrections,
large_lag, large_lag_peers, scenarios, start_bounds) and, for the ppo-by-lag figure, the
one-seed lag pilots (experiments/calibration/runs/L*). Every run must come from one warm-start build (the report
stops and names the runs otherwise; pilots of another build are left out), so runs made on
another machine, or on another task, go to a root and a report of their own. Writes
<out>/{lag_*.png, REPORT.md, lag_summary.csv, lag_claims.csv, lag_search.csv, lag_paired.csv}
and, where a method also ran with other parameters (an ablation such as `start_bounds`),
lag_variants.csv (default figures/lag/).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # `python analysis/lag_report.py` puts only analysis/ there
    sys.path.insert(0, str(REPO))

from analysis import style  # noqa: E402
from analysis.fig_lag import (  # noqa: E402
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
from analysis.lag_claims import lag_claims  # noqa: E402
from analysis.lag_runs import (  # noqa: E402
    check_one_warm_start,
    lag_summary,
    lag_table,
    steady_updates,
    warm_start,
)
from analysis.lag_variants import variant_table  # noqa: E402
from analysis.loader import RunSet, load_runs  # noqa: E402
from analysis.plotting import Options, SkipFigure  # noqa: E402
from analysis.report import md_table, verdict_counts  # noqa: E402
from analysis.search_outcomes import searches_bounds  # noqa: E402
from analysis.stats import fmt_ci  # noqa: E402

DEFAULT_RUNS = REPO / "experiments" / "lag_results"
DEFAULT_PILOTS = sorted((REPO / "experiments" / "calibration" / "runs").glob("L[0-9]*"))
CELL_COLS = {
    "final_greedy_acc": "final greedy", "final_sampled_acc": "final sampled",
    "entropy_drift": "entropy drift", "steady_clip_frac": "clip frac",
    "steady_abs_log_r": "mean abs log r", "steady_rho_before": "rho before search",
    "steady_grad_clipped": "grad-norm clipped",
    # BAPO acts only when negative tokens carry > 1 - rho0 of the gradient; within a group
    # the advantages cancel, so what tips the share is failing responses being longer
    "length_pos": "length A>0", "length_neg": "length A<0",
}


def ppo_by_lag(runs: RunSet, pilots: RunSet | None) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """Step records and lags of coupled ppo runs with a config lag; a pilot fills a
    (lag, seed) only where the sweeps have no run."""
    def pick(rs: RunSet) -> pd.DataFrame:
        t = lag_table(rs)
        return t[(t["method"] == style.BASELINE) & (t["anchor"] == "coupled")
                 & t["source"].isin(["fresh", "delay"])]

    main = pick(runs)
    steps = [runs.steps[runs.steps["run_id"].isin(main["run_id"])]]
    lags = [main]
    note = ""
    if pilots is not None and pilots.runs:
        extra = pick(pilots)
        extra = extra[~extra.set_index(["lag", "seed"]).index.isin(
            main.set_index(["lag", "seed"]).index)]
        if not extra.empty:
            note = (f"{len(extra)} run(s) from the one-seed lag pilots (2 threads) beside "
                    "the sweeps' (1 thread)")
            steps.append(pilots.steps[pilots.steps["run_id"].isin(extra["run_id"])])
            lags.append(extra)
    return pd.concat(steps, ignore_index=True), pd.concat(lags, ignore_index=True), note


def bapo_updates(runs: RunSet) -> pd.DataFrame:
    """Steady updates of the runs whose method searches its bounds, with `rho0` (the
    parameter its traits name as the target)."""
    # the steady updates of every run, then the searching ones: a replay or partial cell's
    # lag label pools all its runs (lag_runs._measured_lags), so it matches the cell tables
    rho0 = {r.run_id: r.method_param(r.traits.target) for r in runs.select(searches_bounds)}
    u = steady_updates(runs)
    u = u[u["run_id"].isin(rho0)] if not u.empty else u
    return u if u.empty else u.assign(rho0=u["run_id"].map(rho0))


def cell_table(s: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds per (lag, anchor, method), with the seed count."""
    g = s.groupby(["lag_low", "lag", "anchor", "method"], sort=True)
    out = g[list(CELL_COLS)].mean().round(4)
    out.insert(0, "seeds", g.size())
    return out.reset_index().drop(columns="lag_low").rename(columns=CELL_COLS)


def write(runs: RunSet, pilots: RunSet | None, opts: Options,
          title: str = "Lag sweeps: where the clip binds") -> Path:
    warm = check_one_warm_start(runs)
    if pilots is not None:  # pilots of another build would mix warm starts in one figure
        pilots = pilots.subset(lambda r: warm_start(r) == warm)
        pilots = pilots if pilots.runs else None
    opts.out.mkdir(parents=True, exist_ok=True)
    style.setup()
    s = lag_summary(runs)
    if s.empty:
        raise SystemExit(f"no usable runs under the given roots ({len(runs.skipped)} skipped)")
    steps, lags, note = ppo_by_lag(runs, pilots)
    ppo_updates = steady_updates(runs.subset(lambda r: r.run_id in set(lags["run_id"])))
    if pilots is not None:
        extra = steady_updates(pilots.subset(lambda r: r.run_id in set(lags["run_id"])))
        ppo_updates = pd.concat([ppo_updates, extra], ignore_index=True)
    bapo = bapo_updates(runs)
    figures, skipped = [], []
    for make in (lambda: fig_lag_training(steps, lags, opts, note),
                 lambda: fig_lag_ratios(ppo_updates, opts, note),
                 lambda: fig_lag_bapo(bapo, {r.run_id: r.traits for r in runs.runs}, opts),
                 lambda: fig_lag_forest(s[s["anchor"] == "coupled"], opts),
                 lambda: fig_lag_corrections(s, opts, _on_policy(s))):
        try:
            figures.append(make())
        except SkipFigure as e:
            skipped.append(str(e))
    claims = lag_claims(s, bapo)
    variants = variant_table(s, {r.method: r.method_name for r in runs.runs})
    s.to_csv(opts.out / "lag_summary.csv", index=False)
    claims.to_csv(opts.out / "lag_claims.csv", index=False)
    if not variants.empty:
        variants.to_csv(opts.out / "lag_variants.csv", index=False)
    for f in figures:
        if f.name in ("lag_bapo", "lag_forest"):
            name = {"lag_bapo": "lag_search", "lag_forest": "lag_paired"}[f.name]
            f.data.to_csv(opts.out / f"{name}.csv", index=False)
    tasks = ", ".join(f"`{t}`" for t in sorted({str(r.cfg("task.name", "arithmetic")) for r in runs.runs}))
    text = _markdown(s, claims, figures, skipped, warm, ppo_updates, title, tasks, variants)
    path = opts.out / "REPORT.md"
    path.write_text(text)
    return path


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
    shown = claims[["claim", "paper", "measured", "verdict", "note"]]
    lines = [
        f"# {title}",
        "",
        "Written by `python analysis/lag_report.py` from the lag sweeps' runs "
        f"(task {tasks}; warm start `{warm}`; every run shares it). Lags are in optimizer updates; a delay "
        "queue's first steps train on the initial weights' rollouts and are left out of the "
        "steady numbers. Comparisons are paired by seed: held only when the paired 95% "
        "t-interval excludes 0 in the stated direction.",
        "",
        f"## Claims ({verdict_counts(claims)})",
        "",
        md_table(shown.fillna("—")),
        "",
        "## Cells (mean over seeds)",
        "",
        "final = last eval on 256 held-out problems; entropy drift = mean of the last 5 steps "
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
    lines += ["## Figures", ""]
    lines += [f"![{f.name}]({f.name}.png)" for f in figures]
    lines += [f"- skipped: {why}" for why in skipped]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", nargs="+", type=Path, default=[DEFAULT_RUNS])
    p.add_argument("--pilots", nargs="*", default=None,
                   help="run dirs of the lag pilots (default experiments/calibration/runs/L*; "
                        "'none': leave them out)")
    p.add_argument("--out", type=Path, default=REPO / "figures" / "lag")
    p.add_argument("--formats", nargs="+", default=["png"])
    p.add_argument("--title", default="Lag sweeps: where the clip binds",
                   help="the report's heading (one report per root: say what the root holds)")
    args = p.parse_args(argv)
    missing = [str(r) for r in args.runs if not r.exists()]
    if missing:
        raise SystemExit(f"--runs: no such folder: {', '.join(missing)}")
    pilot_dirs = DEFAULT_PILOTS if args.pilots is None else (
        [] if args.pilots == ["none"] else [Path(x) for x in args.pilots])
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
