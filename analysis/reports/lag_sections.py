"""The sections of a lag report's REPORT.md (analysis/reports/lag.py writes it)."""

from __future__ import annotations

import pandas as pd

from analysis.claims.lag import REFERENCE
from analysis.core.final import FINAL_EVALS
from analysis.core.multiplicity import fmt_p
from analysis.core.stats import fmt_ci, fmt_half
from analysis.figures.contract import Drawn
from analysis.figures.lag_common import lag_order
from analysis.figures.lag_corrections import corrections_table
from analysis.figures.lag_forest import paired_rows
from analysis.figures.lag_ratios import outside_clip, ratio_shares
from analysis.reports.markdown import (
    SEEDS_HEADING,
    SEEDS_RULE,
    holm_counts,
    md_table,
    shown_claims,
    verdict_counts,
)

PILOT_FIGURE_PREFIX = "lag_pilot"  # figures of the calibration pilots, kept apart
CELL_COLS = {
    "final_greedy_acc": "final greedy", "final_sampled_acc": "final sampled",
    "gain_greedy_acc": "greedy − step 0", "gain_sampled_acc": "sampled − step 0",
    "entropy_drift": "entropy drift", "steady_clip_frac": "clip frac",
    "steady_abs_log_r": "mean abs log r", "steady_rho_before": "rho before search",
    "steady_grad_clipped": "grad-norm clipped",
    # BAPO acts only when negative tokens carry > 1 - rho0 of the gradient; within a group
    # the advantages cancel, so what tips the share is failing responses being longer
    "length_pos": "length A>0", "length_neg": "length A<0",
}
INTRO = (
    "Lags are in optimizer updates; a delay queue's first steps train on the initial "
    "weights' rollouts and are left out of the steady numbers. Final accuracy is the mean of "
    f"each run's last {FINAL_EVALS} evals; cells at one lag have them at the same updates, "
    "and a comparison across lags says in its note how it is aligned. Comparisons are paired "
    "by seed: held only when the paired 95% t-interval excludes 0 in the stated direction; "
    "seeds that all gave one value have no interval. `after Holm`: the verdict that survives "
    "Holm's correction over this table's tested rows (two-sided t-test p, Holm-adjusted p, "
    "number of tests); a settled verdict whose adjusted p is not below 0.05 becomes `not "
    "settled`. The search rows are counts over pooled updates (Wilson intervals), not tests, "
    "and hold by construction (the search walks its grid to the end): shown, not counted. "
    + SEEDS_RULE
)
CELLS_INTRO = (
    f"final = mean of the last {FINAL_EVALS} evals on 256 held-out problems (their steps and "
    "optimizer updates in the second column: a delay queue's warm-up steps count, so lags "
    "differ in updates at equal steps on their own rollouts); `− step 0`: final minus the "
    "run's own eval at step 0, before any update (a cell whose gain is near 0 has not "
    "learned: its comparisons say how methods lose, not what they gain). Every other column "
    "is over the steady steps and updates (a delay queue's warm-up left out): entropy drift "
    "= mean of the last 5 steady steps minus the first 5 (negative: fell; a lag-0 cell in a "
    "suite at equal updates, as the grid's: windows of equal updates); clip frac, mean abs "
    "log r, rho before search and grad-norm clipped; lengths in tokens of the responses "
    "with positive and negative advantage."
)


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


def positive_share_by_lag(updates: pd.DataFrame) -> pd.DataFrame:
    """Per lag: runs, updates, mean rho and the share of updates with rho < 0.4."""
    rho = pd.to_numeric(updates["rho"], errors="coerce")
    g = updates.assign(rho=rho, below=(rho < 0.4).astype(float)).groupby("lag", sort=False)
    return pd.DataFrame({"runs": g["run_id"].nunique(), "updates": g.size(),
                         "mean rho": g["rho"].mean().round(3),
                         "rho < 0.4": g["below"].mean().round(3)})


def equally_spaced(steps: str) -> bool:
    """'80/100/120' is, '40/45/46' is not."""
    x = [int(v) for v in steps.split("/")]
    return len({b - a for a, b in zip(x, x[1:], strict=False)}) <= 1


def _spacing_lines(s: pd.DataFrame) -> list[str]:
    """The cells whose last evals are not equally spaced: the run's end is off its
    eval.every grid, so its final accuracy weighs the end twice (src/preflight.py warns of
    this before a run)."""
    if "final_eval_steps" not in s:
        return []
    uneven = []
    ordered = s.sort_values("lag_low", kind="stable") if "lag_low" in s else s
    for lag, g in ordered.groupby("lag", sort=False):
        uneven += [f"lag {lag} (steps {steps})" for steps in sorted(set(
            g["final_eval_steps"].dropna())) if not equally_spaced(steps)]
    if not uneven:
        return []
    return [f"Final evals not equally spaced: {', '.join(uneven)}. The run's end is off its "
            "eval.every grid, so its last two evals sit a few steps apart and the final "
            "accuracy weighs the end twice; cells at one lag share their evals, so their "
            "comparisons are aligned, but evals belong at fixed update intervals "
            "(src/preflight.py now warns of this before a run).", ""]


def _claims_lines(claims: pd.DataFrame) -> list[str]:
    shown = shown_claims(claims)[["claim", "paper", "measured", "verdict", "after Holm",
                                   SEEDS_HEADING, "note"]]
    return [f"## Claims ({verdict_counts(claims)})", "", holm_counts(claims), "",
            md_table(shown.fillna("—")), ""]


def _paired_lines(s: pd.DataFrame) -> list[str]:
    """Every method against the reference at each lag, paired by seed (the lag_forest
    figure's rows, lag_paired.csv): descriptive rows, many at once, so each with its paired
    t-test's p and the Holm-adjusted p over all of them."""
    d = paired_rows(s[s["anchor"] == "coupled"])
    if d.empty or not (d["n"] > 0).any():
        return []
    d = d.sort_values("lag_low", kind="stable")
    words = {"final_greedy_acc": "final greedy", "final_sampled_acc": "final sampled",
             "entropy_drift": "entropy drift"}
    rows = [{"lag": r.lag, "method": r.method, "metric": words.get(r.metric, r.metric),
             f"method − {REFERENCE}": _paired_text(r), "p": fmt_p(r.p),
             "Holm p": fmt_p(r.holm_p),
             "interval excludes 0 after Holm": "yes" if r.holm_p < 0.05 else "no",
             "note": r.note or ""} for r in d.itertuples(index=False)]
    return [f"## Every method against {REFERENCE}, paired by seed", "",
            "Not claim rows: the paired differences the forest figure draws (lag_paired.csv), "
            f"{len(d)} at once, so each has its paired t-test's p and the Holm-adjusted p over "
            "all of them; the note names a gradient-norm clipping gap of 5 points or more "
            "(steady updates).", "", md_table(pd.DataFrame(rows)), ""]


def _paired_text(r) -> str:
    if not r.n:
        return "—"
    above = sum(x > 0 for x in r.per_seed)
    half = "" if r.low != r.low else f" ± {fmt_half((r.high - r.low) / 2)}"
    return f"{r.mean:+.3f}{half} (n={r.n}; {above} of {r.n} seeds > 0)"


def _variant_lines(variants: pd.DataFrame) -> list[str]:
    if variants.empty:
        return []
    return ["## Parameter variants (paired by seed)", "",
            "A variant runs a method with parameters other than its yaml's; it is compared "
            f"with the method's own runs and with {REFERENCE} at the same lag, seed by seed "
            "(mean ± 95% t-interval half-width; seeds with a difference > 0).", "",
            md_table(variants.astype(object).fillna("—")), ""]


def _ratio_lines(updates: pd.DataFrame) -> list[str]:
    shares = ratio_shares(updates) if not updates.empty else pd.DataFrame()
    if shares.empty:
        return []
    order = lag_order(shares["lag"], shares["lag_low"])
    off = outside_clip(shares).unstack("sign").reindex(order).round(4)
    off.columns = [f"outside, {c}" for c in off.columns]
    table = off.join(positive_share_by_lag(updates).reindex(order)).reset_index()
    return [f"## {REFERENCE} by lag: ratios outside [0.8, 1.2] and the positive share", "",
            "Steady updates; `rho` is the positive share of the gradient at [0.8, 1.2] "
            f"({REFERENCE} logs it as BAPO would see it before any search), one value per "
            "mini-batch update; `rho < 0.4` the share of updates where BAPO's search would "
            "start.", "", md_table(table.astype(object).fillna("—")), ""]


def _anchor_lines(s: pd.DataFrame) -> list[str]:
    corr = corrections_table(s)
    if corr.empty or corr["anchor"].nunique() <= 1:
        return []
    order = lag_order(corr["lag"], corr["lag_low"])
    cell = corr.assign(text=[fmt_ci(m, lo, hi, n) for m, lo, hi, n in
                             corr[["mean", "low", "high", "n"]].itertuples(index=False)])
    wide = cell.pivot(index="anchor", columns="lag", values="text").reindex(columns=order)
    return [f"## {REFERENCE}'s ratio anchor against the lag (final greedy accuracy)", "",
            "AReaL's Table 3 layout: coupled is the naive ratio to the behaviour policy, "
            "recompute the ratio to the step-start policy, decoupled AReaL's objective.",
            "", md_table(wide.reset_index().astype(object).fillna("—")), ""]


def _figure_lines(drawn: Drawn) -> list[str]:
    figures = drawn.made
    sweeps = [f for f in figures if not f.name.startswith(PILOT_FIGURE_PREFIX)]
    lines = ["## Figures", "", *[f"![{f.name}]({f.name}.png)" for f in sweeps]]
    lines += [f"- skipped: {why}" for _, why in drawn.skipped]
    pilots = [f for f in figures if f.name.startswith(PILOT_FIGURE_PREFIX)]
    if pilots:
        lines += ["", "## One-seed calibration pilots, apart from the sweeps", "",
                  f"{REFERENCE} pilots of this build (`--pilots`), one seed each: what chose "
                  "the lags, not a result beside the sweeps.", "",
                  *[f"![{f.name}]({f.name}.png)" for f in pilots]]
    return lines


def markdown(s: pd.DataFrame, claims: pd.DataFrame, drawn: Drawn, warm: str,
             ref_updates: pd.DataFrame, title: str, tasks: str, variants: pd.DataFrame) -> str:
    lines = [
        f"# {title}", "",
        "Written by `python analysis/lag_report.py` from the lag sweeps' runs "
        f"(task {tasks}; warm start `{warm}`; every run shares it). {INTRO}", "",
        *_claims_lines(claims),
        "## Cells (mean over seeds)", "", CELLS_INTRO, "",
        md_table(cell_table(s).astype(object).fillna("—")), "", *_spacing_lines(s),
        *_paired_lines(s), *_variant_lines(variants), *_ratio_lines(ref_updates), *_anchor_lines(s),
        *_figure_lines(drawn),
    ]
    return "\n".join(lines) + "\n"
