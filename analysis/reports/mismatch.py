"""The mismatch report: is BAPO robust to the training-inference mismatch?

From the runs of the mismatch grid (a low-precision sampler with and without corrections)
and the fp32 cells they are paired with (testbed_grid's ramble_4x): the claim rows of
analysis/claims/mismatch.py with Holm, final accuracy per method and setting (both metrics,
the primary first), the mismatch and the corrections' diagnostics per setting, and the
figures of analysis/figures/mismatch.py. Only methods with a run in a low-precision setting
are read, so the fp32 root's other methods stay out without being named.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.claims.mismatch import FP32, mismatch_claims
from analysis.core.families import family_names, within_family
from analysis.core.loader import RunSet, load_runs
from analysis.core.run_dirs import shown_path
from analysis.core.stats import fmt_ci, mean_ci
from analysis.core.summary import run_summary
from analysis.figures.contract import Options, SkipFigure
from analysis.figures.mismatch import FIGURES, draw_accuracy, setting_of, settings_order
from analysis.reports.markdown import (
    SEEDS_HEADING,
    SEEDS_RULE,
    holm_counts,
    md_table,
    shown_claims,
    verdict_counts,
)

# Per-update diagnostics, averaged over each run's updates, then over a setting's runs.
DIAGNOSTICS = {
    "rollout_corr_kl": "k1 KL(mu||pi_old)", "rollout_corr_k3_kl": "k3 KL",
    "rollout_corr_chi2_token": "chi2 token", "rollout_corr_chi2_seq": "chi2 seq",
    "rollout_corr_rollout_is_mean": "IS mean", "rollout_corr_rollout_is_max": "IS max",
    "rollout_corr_rollout_is_eff_sample_size": "IS ESS",
    "rollout_corr_rollout_is_ratio_fraction_high": "IS above cap",
    "rollout_corr_rollout_rs_masked_fraction": "rejected tokens",
    "clip_frac": "clip fraction",
}
CLAIM_COLUMNS = ["claim", "paper", "measured", "verdict", "after Holm", SEEDS_HEADING, "note"]
METRICS = {"final_sampled_acc": "sampled (primary)", "final_greedy_acc": "greedy"}


def mismatch_runs(runs: RunSet) -> tuple[RunSet, RunSet]:
    """The runs of every method that has a run with a low-precision sampler, at the
    experiments those runs use (their fp32 partners included), and apart from them the fp32
    runs made on another CPU family than the low-precision runs where the same method and
    seed also has an fp32 run on theirs: the claims pair within one family, and the others
    measure what a last-bit difference alone does."""
    runs = runs.subset(lambda r: r.status == "finished")  # a running sweep's runs wait
    low = [r for r in runs.runs if (r.cfg("rollout.precision") or "fp32") != "fp32"]
    methods, experiments = {r.method_name or r.method for r in low}, {r.experiment for r in low}
    runs = runs.subset(lambda r: (r.method_name or r.method) in methods and r.experiment in experiments)
    return within_family(runs, lambda r: (r.cfg("rollout.precision") or "fp32") != "fp32",
                         lambda r: (r.method_name or r.method, setting_of(r), r.seed))


def family_table(paired: pd.DataFrame, theirs: pd.DataFrame) -> pd.DataFrame:
    """Per method, the fp32 cells on the grid's CPU family (`paired`, settings_summary of the
    claims' runs) minus the same cells (method, seed, config) on another family (`theirs`,
    settings_summary of the runs set apart), paired by seed: the size of a last-bit
    perturbation."""
    if theirs.empty:
        return pd.DataFrame()
    ours = paired[paired["experiment"] == FP32]
    rows = []
    for (method, fam), cell in theirs.groupby(["method", "family"]):
        both = cell.merge(ours[ours["method"] == method].drop(columns="family"), on="seed",
                          suffixes=("_other", ""))
        row = {"method": method, "other family": fam, "seeds": len(both)}
        for key, name in METRICS.items():
            diff = both[key] - both[f"{key}_other"]
            row[f"{name}: this - other"] = fmt_ci(*mean_ci(diff))
            row[f"{name}: sd of the differences"] = f"{diff.std(ddof=1):.3f}" if len(diff) > 1 else "-"
            # Same-seed correlation of the two families' values: near 0 a last-bit change acts
            # as a new seed, far from it the seed still shapes both runs (3 seeds at least).
            row[f"{name}: same-seed r"] = (f"{both[key].corr(both[f'{key}_other']):.2f}"
                                           if len(both) > 2 else "-")
        rows.append(row)
    return pd.DataFrame(rows)


def settings_summary(runs: RunSet) -> pd.DataFrame:
    """The run summary with each run's setting in the `experiment` column (the claim rows
    name their cells by it), its method by its config's method.name, and its CPU family."""
    s = run_summary(runs)
    by_id = {r.run_id: r for r in runs.runs}
    s["experiment"] = s["run_id"].map(lambda i: setting_of(by_id[i]))
    s["method"] = s["run_id"].map(lambda i: by_id[i].method_name or by_id[i].method)
    s["family"] = s["run_id"].map(lambda i: by_id[i].numerics_family)
    return s


def accuracy_table(s: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (method, name), cell in s.groupby(["method", "experiment"]):
        rows.append({"method": method, "setting": name, "seeds": len(cell),
                     "final sampled (primary)": fmt_ci(*mean_ci(cell["final_sampled_acc"])),
                     "final greedy": fmt_ci(*mean_ci(cell["final_greedy_acc"])),
                     "gain sampled": fmt_ci(*mean_ci(cell["gain_sampled_acc"]))})
    out = pd.DataFrame(rows)
    order = {n: i for i, n in enumerate(settings_order(out["setting"]))} if len(out) else {}
    return out.sort_values(["method", "setting"], key=lambda c: c.map(order) if c.name == "setting"
                           else c).reset_index(drop=True)


def diagnostics_table(runs: RunSet) -> pd.DataFrame:
    """Per setting: the mean over its runs of each run's mean per-update diagnostic (the
    sampler's gap from the step records); '-' where no run logs it."""
    u = runs.updates
    label = {r.run_id: setting_of(r) for r in runs.runs}
    keys = [k for k in DIAGNOSTICS if k in u.columns]
    per_run = u.groupby("run_id")[keys].mean() if keys else pd.DataFrame()
    gap = runs.steps.groupby("run_id")["sampler_logp_gap"].mean() if "sampler_logp_gap" in runs.steps else None
    if gap is not None:
        per_run = per_run.join(gap.rename("sampler_logp_gap"), how="outer")
    per_run["setting"] = per_run.index.map(label)
    table = per_run.groupby("setting").mean()
    table = table.reindex(settings_order(table.index))
    names = {"sampler_logp_gap": "mean abs gap", **DIAGNOSTICS}
    table = table[[c for c in names if c in table.columns]].rename(columns=names)
    return table.map(lambda v: "-" if pd.isna(v) else f"{v:.3g}").reset_index()


def replication_table(ours: pd.DataFrame, theirs: pd.DataFrame) -> pd.DataFrame:
    """The fp32 cells' own comparisons on each CPU family they were made on (`ours`, the
    claims' settings_summary, and `theirs`, the one set apart): every method's gain over its
    warm start and every pair of methods' paired difference, sampled (primary) and greedy,
    so a verdict drawn on one family can be read beside the same seeds on the other."""
    if theirs.empty:
        return pd.DataFrame()
    both = pd.concat([ours, theirs])
    both = both[both["experiment"] == FP32]
    rows = []
    for fam, cells in both.groupby("family", sort=False):
        table = cells.set_index(["method", "seed"])
        methods = sorted(set(cells["method"]))
        for method in methods:
            gain = table.loc[method]
            rows.append({"family": fam, "comparison": f"{method}: gain over its warm start",
                         **{name: fmt_ci(*mean_ci(gain[key.replace("final", "gain")]))
                            for key, name in METRICS.items()}})
        for a, b in [(a, b) for i, a in enumerate(methods) for b in methods[i + 1:]]:
            row = {"family": fam, "comparison": f"{a} - {b}, paired by seed"}
            for key, name in METRICS.items():
                diff = (table.loc[a][key] - table.loc[b][key]).dropna()
                row[name] = f"{fmt_ci(*mean_ci(diff))}; {int((diff > 0).sum())} of {len(diff)} above"
            rows.append(row)
    return pd.DataFrame(rows)


def write_report(roots: list[Path], out: Path, title: str) -> pd.DataFrame:
    """REPORT.md, claims.csv, accuracy.csv, diagnostics.csv and the figures under `out`;
    returns the judged claims."""
    runs, other_family = mismatch_runs(load_runs(roots))
    if not runs.runs:
        raise SkipFigure(f"no run with a low-precision sampler under {', '.join(map(str, roots))}")
    out.mkdir(parents=True, exist_ok=True)
    opts = Options(out=out, formats=("png",))
    s = settings_summary(runs)
    claims = mismatch_claims(s)
    claims.to_csv(out / "claims.csv", index=False)
    acc = accuracy_table(s)
    acc.to_csv(out / "accuracy.csv", index=False)
    diag = diagnostics_table(runs)
    diag.to_csv(out / "diagnostics.csv", index=False)
    theirs = settings_summary(other_family) if other_family.runs else pd.DataFrame()
    families = family_table(s, theirs)
    replication = replication_table(s, theirs)
    if len(families):
        families.to_csv(out / "families.csv", index=False)
        replication.to_csv(out / "replication.csv", index=False)
    made = [draw_accuracy(s, opts).name]
    for figure in FIGURES:
        try:
            made.append(figure.draw(runs, opts).name)
        except SkipFigure as e:
            made.append(f"{figure.name} (skipped: {e})")
    shown = shown_claims(claims)[CLAIM_COLUMNS]
    text = [f"# {title}", "", f"{len(runs.runs)} runs under {', '.join(shown_path(r) for r in roots)}: "
            f"{', '.join(sorted(set(s['method'])))} in the settings "
            f"{', '.join(settings_order(s['experiment'].unique()))} (sampler precision / "
            "correction; docs/mismatch.md).", "",
            "## Claims (declared before the runs: experiments/sweeps.yaml `mismatch_grid`)", "",
            f"Verdicts: {verdict_counts(claims)}. {holm_counts(claims)}", "", SEEDS_RULE, "",
            md_table(shown), "",
            "## Final accuracy by method and setting", "", md_table(acc), "",
            "## The mismatch and the corrections (means per update, then over runs)", "",
            md_table(diag), ""]
    fams = family_names(runs)
    text += ["## CPU families", "", f"The runs above were made on {', '.join(fams)} "
             "(src/_numerics.py numerics_family)." + (
                 "" if len(fams) == 1 else " The claims pair runs of different families: each "
                 "difference holds their last-bit rounding difference as well as the setting's."), ""]
    if len(families):
        text += ["The same fp32 cells made on another family, left out of the claims, paired by "
                 "seed against the ones above: what a last-bit perturbation alone does to the "
                 "final accuracy. `same-seed r`: the Pearson correlation over seeds of the two "
                 "families' values; a perturbation that acted as a new seed would leave it near "
                 "0, so a large r (positive or negative) says the two runs of a seed did not part "
                 "as two seeds do.", "", md_table(families), "",
                 "The fp32 cells' own comparisons on each family: a verdict drawn on one beside "
                 "the same seeds and configs on the other.",
                 "", md_table(replication), ""]
    text += ["## Figures", ""]
    text += [f"- `{name}`" for name in made]
    (out / "REPORT.md").write_text("\n".join(text) + "\n")
    return claims
