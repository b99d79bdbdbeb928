"""The clip family's report: does any 2025-26 clip rule beat bapo or ppo on the ramble testbed?

From the runs of the clip_family sweep and the committed cells they are paired with
(testbed_grid's ramble_4x and testbed_lags' ramble_delay_4: ppo, clip_higher, bapo): the
claim rows of analysis/claims/clip_family.py with Holm, final accuracy per method and
experiment (greedy, the declared primary metric, first), the regime table of
analysis/reports/clip_regime.py, and the paired-difference forest of
analysis/figures/clip_family.py. Only the methods the rows name (the family, its token-mean
control and the three reference methods) at the sweep's two experiments are read, so the
committed roots' other methods and experiments stay out without being named.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.claims.clip_family import (
    BASELINE,
    CONTROL,
    EXPERIMENTS,
    FAMILY,
    METHODS,
    PROPOSED,
    SWEEP,
    clip_family_claims,
    method_label,
)
from analysis.core.families import family_names, within_family
from analysis.core.final import warmup_steps
from analysis.core.lags import with_steady_steps
from analysis.core.loader import Run, RunSet, load_runs
from analysis.core.run_dirs import shown_path
from analysis.core.stats import fmt_ci, mean_ci
from analysis.core.summary import run_summary
from analysis.figures.clip_family import draw_forest
from analysis.figures.contract import Options, SkipFigure
from analysis.reports.clip_regime import DRIFT, DRIFT_VS, ordered, regime_table
from analysis.reports.markdown import (
    SEEDS_HEADING,
    SEEDS_RULE,
    holm_counts,
    md_table,
    shown_claims,
    verdict_counts,
)

CLAIM_COLUMNS = ["claim", "paper", "measured", "verdict", "after Holm", SEEDS_HEADING, "note"]


def _read(run: Run) -> bool:
    """One of the rows' cells: a finished run (a running sweep's runs wait) of a method the
    rows name at one of the sweep's experiments, with the fp32 sampler and no correction as
    the sweep runs (a root may hold the mismatch grid's int8 cells beside its fp32 ones)."""
    return (run.status == "finished" and run.experiment in EXPERIMENTS
            and method_label(run) in METHODS
            and (run.cfg("rollout.precision") or "fp32") == "fp32"
            and (run.cfg("correction.name") or "none") == "none")


def family_runs(runs: RunSet) -> tuple[RunSet, RunSet]:
    """(the runs the report reads, the reference runs set apart): a reference cell (method
    and experiment) made on the sweep's CPU family is paired, and the same cell made on
    another family is set apart (analysis/core/families.py); SkipFigure where a method and
    experiment hold runs of two configs (a `bapo.rho0=0.3` variant beside bapo): pooled,
    one seed would count twice."""
    runs, apart = within_family(runs.subset(_read),
                                lambda r: method_label(r) in (*FAMILY, CONTROL),
                                lambda r: (method_label(r), r.experiment))
    configs: dict[tuple[str, str], dict[str, str]] = {}
    for r in runs.runs:
        configs.setdefault((method_label(r), r.experiment), {}).setdefault(r.cell, r.run_id)
    mixed = [f"{label} at {experiment} ({' and '.join(ids.values())})"
             for (label, experiment), ids in configs.items() if len(ids) > 1]
    if mixed:
        raise SkipFigure(f"runs of two configs in one cell: {'; '.join(mixed)}; give the "
                         "roots of one config each")
    return runs, apart


def family_summary(runs: RunSet) -> pd.DataFrame:
    """The run summary with each run's `method_label` in the `method` column (the rows name
    their cells by it) and the entropy drift over the steady steps (a delay queue's first K
    steps train on the initial weights' rollouts), as testbed_lags' report reads it."""
    s = run_summary(runs)
    by_id = {r.run_id: r for r in runs.runs}
    s["method"] = s["run_id"].map(lambda i: method_label(by_id[i]))
    warmup = pd.Series({r.run_id: warmup_steps(r) for r in runs.runs})
    return with_steady_steps(s, runs, warmup)


def accuracy_table(s: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (method, experiment), cell in s.groupby(["method", "experiment"]):
        rows.append({"method": method, "experiment": experiment,
                     "final greedy (primary)": fmt_ci(*mean_ci(cell["final_greedy_acc"])),
                     "final sampled": fmt_ci(*mean_ci(cell["final_sampled_acc"])),
                     "gain greedy": fmt_ci(*mean_ci(cell["gain_greedy_acc"])),
                     "seeds": len(cell)})
    return ordered(pd.DataFrame(rows))


REFERENCES = (PROPOSED, BASELINE)  # the methods the rows compare the family with


def not_learning_lines(s: pd.DataFrame) -> list[str]:
    """A paragraph naming each reference cell whose greedy gain over its warm start has a
    95% interval reaching 0: a row 'X beats bapo' there compares methods that have not been
    shown to learn, so 'level with bapo' means level at not learning. None when every
    reference learns."""
    quiet = []
    for (method, experiment), cell in s[s["method"].isin(REFERENCES)].groupby(
            ["method", "experiment"]):
        mean, lo, hi, n = mean_ci(cell["gain_greedy_acc"])
        if n > 1 and lo <= 0:
            quiet.append(f"{method} at {experiment} {fmt_ci(mean, lo, hi, n)}")
    if not quiet:
        return []
    return ["**What the rows compare.** Greedy gain over the warm start, 95% t-interval over "
            "seeds, of the reference cells whose interval reaches 0: " + "; ".join(quiet)
            + ". Those references are not shown to learn here, so a family rule 'not beating' "
            "them (or level with them) is a comparison of methods that do not learn, not "
            "evidence that the rule is no better than the reference at learning. The rows "
            "say so in their notes (`does not learn here`).", ""]


def write_report(roots: list[Path], out: Path, title: str) -> pd.DataFrame:
    """REPORT.md, claims.csv, accuracy.csv, regime.csv and the figure under `out`; returns
    the judged claims."""
    runs, apart = family_runs(load_runs(roots))
    if not any(method_label(r) in (*FAMILY, CONTROL) for r in runs.runs):
        raise SkipFigure(f"no finished run of the clip family ({', '.join(FAMILY)}) at "
                         f"{' or '.join(EXPERIMENTS)} under {', '.join(map(str, roots))}")
    out.mkdir(parents=True, exist_ok=True)
    s = family_summary(runs)
    claims = clip_family_claims(s)
    claims.to_csv(out / "claims.csv", index=False)
    acc = accuracy_table(s)
    acc.to_csv(out / "accuracy.csv", index=False)
    regime = regime_table(runs, s)
    regime.to_csv(out / "regime.csv", index=False)
    try:
        figure = draw_forest(s, claims, Options(out=out, formats=("png",))).name
    except SkipFigure as e:  # the family's runs without their references: tables only
        figure = f"fig_clip_family_forest (skipped: {e})"
    text = [f"# {title}", "", f"{len(runs.runs)} runs under {', '.join(shown_path(r) for r in roots)}: "
            f"{', '.join(m for m in METHODS if m in set(s['method']))} at "
            f"{', '.join(e for e in EXPERIMENTS if e in set(s['experiment']))} (docs/methods.md, "
            "\"The 2025-26 clip family\").", "",
            f"## Claims (declared before the runs: experiments/sweeps.yaml `{SWEEP}`)", "",
            f"Verdicts: {verdict_counts(claims)}. {holm_counts(claims)}", "",
            *not_learning_lines(s), SEEDS_RULE, "",
            md_table(shown_claims(claims)[CLAIM_COLUMNS]), "",
            "## Final accuracy by method and experiment", "",
            "Mean of each run's last three evals, 95% t-interval over seeds; gain: final minus "
            "the run's step-0 eval (the warm start).", "", md_table(acc), "",
            *regime_text(regime), "", *families_text(runs, apart), "## Figure", "",
            f"- `{figure}`"]
    (out / "REPORT.md").write_text("\n".join(text) + "\n")
    return claims


def families_text(runs: RunSet, apart: RunSet) -> list[str]:
    """Which CPU families made the runs read, and the other family's reference cells set
    apart, with their accuracy beside the paired ones'."""
    fams = family_names(runs)
    text = ["## CPU families", "", f"The runs read were made on {', '.join(fams)} "
            "(src/_numerics.py numerics_family)." + (
                "" if len(fams) == 1 else " Some reference cells have no run on the sweep's "
                "family yet: their pairs cross families, and each difference holds the "
                "families' last-bit difference as well as the rules'."), ""]
    if apart.runs:
        acc = accuracy_table(family_summary(apart))
        text += [f"Set apart: {len(apart.runs)} reference runs of the same cells made on "
                 f"{', '.join(family_names(apart))}, shown here and not paired:", "",
                 md_table(acc), ""]
    return text


def regime_text(regime: pd.DataFrame) -> list[str]:
    return ["## The regime: what each rule does to the tokens and the gradient", "",
            "Per run, the mean over its steady updates (a delay queue's warm-up left out), then "
            "the mean over seeds ± the 95% t half-width. `clipped A>0` / `A<0`: the share of "
            "positive / negative loss tokens whose gradient the method removed (clip or mask: "
            "`clip_frac_pos` / `clip_frac_neg`); `gated`, `preserved_low`, `preserved_high`, "
            "`dual_capped`: the share of loss tokens in each state that keeps a changed "
            "gradient (— where the runs predate it); `pos share`: the positive tokens' share of "
            "the gradient, every token alike (`contrib_grad_pos_share`) and as sapo's "
            "per-response mean weighs them (`sapo_grad_pos_share`); `updates under rho0`: the "
            "updates whose share, as the loss weighs the tokens, is below bapo's target; "
            f"`{DRIFT}`: mean `entropy_mean` of the last 5 steady steps minus the first 5 "
            f"(negative: fell), and `{DRIFT_VS}` its difference from ppo's, seed by seed.", "",
            md_table(regime)]
