"""REPORT.md of a microscope study: the claims (E1-E5) judged, Insight 2's table measured,
each rule's own effects, BAPO's bounds as a distribution, and the figures.

Reads the study dirs' `branches.parquet` and `horizons.parquet` (docs/run_dir.md) and their
`microscope.yaml` (the settings and the commit each ran from).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import yaml

from analysis.claims.microscope import KEYS, judge, parse_claims
from analysis.claims.microscope_expect import judge_expectations, unchecked_clauses
from analysis.claims.microscope_plan import completeness_line, missing_trunks
from analysis.figures.microscope import (
    CLASS_LABELS,
    CLASS_SIGNS,
    draw_entropy_by_arm,
    draw_horizon_accuracy,
    draw_insight2,
    draw_logp_vs_share,
    own_effects,
)
from analysis.figures.microscope_splits import SPLITS, class_effects_by, draw_insight2_splits
from analysis.reports.markdown import fmt_effect, fmt_interval
from analysis.reports.microscope_arms import arm_summary, bounds_distribution, search_outcomes
from analysis.reports.microscope_bounds import bounds_section
from analysis.reports.microscope_holdout import holdout_table
from analysis.reports.microscope_trunk import with_trunk_entropies


def find_studies(roots: list[Path]) -> list[Path]:
    """Every study dir under `roots` (a dir holding microscope.yaml)."""
    return sorted({p.parent for r in roots for p in Path(r).rglob("microscope.yaml")})


def load_tables(studies: list[Path]) -> tuple[dict[str, pd.DataFrame], list[dict]]:
    tables: dict[str, list[pd.DataFrame]] = {"branches": [], "horizons": []}
    meta = []
    for study in studies:
        meta.append({"dir": str(study), **yaml.safe_load((study / "microscope.yaml").read_text())})
        for name in tables:
            path = study / f"{name}.parquet"
            if path.exists():
                table = pd.read_parquet(path)
                tables[name].append(with_trunk_entropies(table, study / "trunk")
                                    if name == "branches" else table)
    return {k: pd.concat(v, ignore_index=True) if v else pd.DataFrame() for k, v in tables.items()}, meta


def claims_table(judged: pd.DataFrame) -> list[str]:
    lines = ["| id | claim | compared | paper | expected before the runs | measured (95% cluster bootstrap) "
             "| 95% t over trunk means | trunks agreeing | verdict (after Holm where it differs) "
             "| against the expectation | states needed | trunks needed |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in judged.itertuples():
        measured = (f"{fmt_interval(r.mean, r.low, r.high)}, {r.states} states"
                    if r.states else "no data")
        over_trunks = "-" if math.isnan(r.t_low) else f"[{fmt_effect(r.t_low)}, {fmt_effect(r.t_high)}]"
        # the raw verdict, and Holm's where it differs (a pilot or no data has no Holm step)
        judged_as = (r.verdict if r.holm_verdict == r.verdict
                     else f"{r.verdict}; after Holm {r.holm_verdict}")
        lines.append(f"| {r.id} | {r.claim} | {r.compared} ({r.metric}) | {r.paper} | {r.expect} | "
                     f"{measured} | {over_trunks} | {r.agree} | {judged_as} | {r.expectation} | "
                     f"{approx_needed(r.states_needed)} | {approx_needed(r.trunks_needed)} |")
    return lines


def approx_needed(count: float) -> str:
    """'~12' (rounded up) for a states or trunks needed figure; '-' where there is none."""
    return "-" if math.isnan(count) else f"~{math.ceil(count)}"


def insight2_table(branches: pd.DataFrame) -> list[str]:
    effects = own_effects(branches, "d_entropy").set_index("arm")
    if not any(f"mask:{c}" in effects.index for c in CLASS_SIGNS):
        return ["No class-mask arm (with a zero arm) in these studies."]
    norm_clipped = branches.groupby("arm")["grad_clipped"].mean()
    lines = ["| token class | paper (Insight 2) | entropy change, mask - zero step | states "
             "| norm clip bound |", "|---|---|---|---|---|"]
    for c, sign in CLASS_SIGNS.items():
        if f"mask:{c}" not in effects.index:
            continue
        e = effects.loc[f"mask:{c}"]
        lines.append(f"| {CLASS_LABELS[c]} | {'rises' if sign > 0 else 'falls'} | "
                     f"{fmt_interval(e['mean'], e['low'], e['high'])} | {int(e['states'])} "
                     f"| {norm_clipped[f'mask:{c}']:.2f} |")
    return lines + ["", NORM_CLIP_NOTE]


# Why the last column: a class's loss falls on its tokens alone, and where the gradient-norm
# clip binds it scales the step down before AdamW adds it to the trunk's moments, so a class
# that binds more often moves less than its own gradient would
NORM_CLIP_NOTE = (
    "`norm clip bound`: the share of the class's states where gradient-norm clipping scaled "
    "its step down. The step then enters AdamW's moments (carried from the trunk) at the "
    "clipped size, so a class that binds more often is damped more: the rows compare "
    "directions, and a class's size only against classes clipped as often.")


EXPECT_NOTE = (
    "`against the expectation`: each row's expectation, written before the study ran, as "
    "transcribed into checks beside it in experiments/sweeps.yaml (`expect_check`: the final "
    "verdict, a range for the mean, an order against other rows), applied by "
    "analysis/claims/microscope_expect.py; a row is judged once it and every row it refers to "
    "have a verdict, or once the study is complete (a pilot then stays a pilot, and a "
    "`verdict` check on it misses).")


HOLDOUT_NOTE = (
    "Readings found exploring some trunks, written down (dated, in experiments/sweeps.yaml) "
    "before the other trunks' rows were read, and judged on those trunks alone. Not among the "
    "claims (no Holm step); \"replicated\": the bootstrap interval excludes 0 on the paper's "
    "side and every trunk's own mean has the paper's sign, a weaker rule than a verdict's "
    "(analysis/reports/microscope_holdout.py).")

# What the split tables are, said once under them
SPLITS_NOTE = (
    "Exploratory: neither split was in the plan written before the runs, and no verdict is "
    "read from them. Phase: the rollouts branched, split into three near-equal runs; "
    "mini-batch entropy: the states split into thirds by the entropy of the mini-batch the "
    "update trains on (the trunk's update record at that state). They show whether the "
    "pooled rows above average effects of opposite sign; the last rows say how spread the "
    "policy was in each third, on the fixed probes, on the trunk's own responses and on the "
    "mini-batch.")


def split_table(effects: pd.DataFrame, split: str) -> list[str]:
    """Insight 2's table within each third of a split (microscope_splits.SPLITS), from its
    class_effects_by."""
    if effects.empty:
        return [f"No class-mask arm (with a zero arm and a `{SPLITS[split][0]}`) to split by."]
    groups = list(dict.fromkeys(effects["group"]))
    cell = effects.set_index(["arm", "group"])
    lines = ["| token class | paper (Insight 2) | " + " | ".join(groups) + " |",
             "|---|---|" + "---|" * len(groups)]
    for c, sign in CLASS_SIGNS.items():
        if f"mask:{c}" not in set(effects["arm"]):
            continue
        cells = [_split_cell(cell, f"mask:{c}", g) for g in groups]
        lines.append(f"| {CLASS_LABELS[c]} | {'rises' if sign > 0 else 'falls'} | " + " | ".join(cells) + " |")
    first = effects.groupby("group", sort=False).first()
    for label, column in (("probe entropy before the update (zero arm)", "entropy_before"),
                          ("the trunk's rollout entropy (its responses)", "trunk_entropy"),
                          ("the mini-batch's entropy (the trunk's update record)", "minibatch_entropy")):
        lines.append(f"| {label} | | " + " | ".join(
            "-" if math.isnan(first.loc[g, column]) else f"{first.loc[g, column]:.3f}"
            for g in groups) + " |")
    return lines


def _split_cell(effects: pd.DataFrame, arm: str, group: str) -> str:
    if (arm, group) not in effects.index:
        return "-"
    e = effects.loc[(arm, group)]
    return f"{fmt_interval(e['mean'], e['low'], e['high'])}, {int(e['states'])} states"


def write_report(roots: list[Path], claims: list[dict], out: Path, formats=("png",),
                 dpi: int = 150, holdout: list[dict] = (), parts: list[dict] | None = None) -> Path:
    """`parts`: the study's design (its sweeps.yaml `parts`), to know when it is complete."""
    parsed, checks = parse_claims(claims)
    studies = find_studies(roots)
    tables, meta = load_tables(studies)
    judged = judge(parsed, tables)
    missing = missing_trunks(parts, meta) if parts else []
    judged["expectation"] = judge_expectations(judged, checks,
                                               study_complete=bool(parts) and not missing)
    branches, horizons = tables["branches"], tables["horizons"]
    out.mkdir(parents=True, exist_ok=True)
    figures = []
    arms = set(branches["arm"]) if not branches.empty else set()
    # the bootstraps of each third, read by its table and its figure panel
    by_split = {s: class_effects_by(branches, s) for s in SPLITS} if not branches.empty else {}
    if "zero" in arms:  # every figure reads a rule against the zero step
        figures += [draw_entropy_by_arm(branches, out, formats, dpi),
                    draw_logp_vs_share(branches, out, formats, dpi)]
        if any(a.startswith("mask:") for a in arms):
            figures += [draw_insight2(branches, out, formats, dpi),
                        draw_insight2_splits(by_split, out, formats, dpi)]
    if not horizons.empty:
        figures.append(draw_horizon_accuracy(horizons, out, formats, dpi))
    lines = _header(meta, branches, horizons) + ["## Claims", ""] + claims_table(judged)
    lines += ["", EXPECT_NOTE, "", completeness_line(parts, missing)]
    if unchecked_clauses(checks):
        lines += ["", "Clauses of the expectations that no check transcribes (judged in words):", "",
                  *unchecked_clauses(checks)]
    if holdout:
        lines += ["", "## Holdout checks", "", HOLDOUT_NOTE, ""] + holdout_table(list(holdout), tables)
    if not branches.empty:
        lines += ["", "## Insight 2, measured", ""] + insight2_table(branches)
        lines += ["", "## Insight 2 by training phase and by mini-batch entropy (exploratory)"]
        for split, effects in by_split.items():
            lines += [""] + split_table(effects, split)
        lines += ["", SPLITS_NOTE]
        lines += ["", "## Each arm, mean over its states", ""] + arm_summary(branches)
        lines += ["", "## Where adaptive bounds sat"] + bounds_distribution(branches)
        lines += bounds_section(branches, parsed)
        lines += ["", "## How the search ended", ""] + search_outcomes(branches)
    lines += ["", "## Figures", ""] + [f"![{p[0].stem}]({p[0].name})" for p in figures]
    path = out / "REPORT.md"
    path.write_text("\n".join(lines) + "\n")
    judged.to_csv(out / "claims.csv", index=False)
    return path


def _header(meta: list[dict], branches: pd.DataFrame, horizons: pd.DataFrame) -> list[str]:
    commits = sorted({str(m.get("commit"))[:7] for m in meta})
    resumed = sorted({str(c)[:7] for m in meta for c in m.get("resumed_at") or []})
    carried = (f" (carried on at {', '.join(resumed)}, which changes only how a resume reuses "
               "recorded rows: docs/microscope.md)" if resumed else "")
    trunks = sorted({(m["trunk_overrides"] and " ".join(m["trunk_overrides"])) for m in meta})
    n_states = 0 if branches.empty else branches.groupby(KEYS["branches"]).ngroups
    return ["# The update microscope", "",
            f"{len(meta)} stud{'y' if len(meta) == 1 else 'ies'} from commit(s) {', '.join(commits)}"
            f"{carried}; "
            f"{n_states} branched states, "
            f"{0 if horizons.empty else len(horizons)} short-horizon rows. Trunks:", "",
            *[f"- `{t}`" for t in trunks], "",
            "Intervals: two-stage cluster bootstrap (trunk seeds, then rollouts within them), "
            "and the t-interval over the trunks' own means; a verdict needs both to exclude 0 "
            "on the same side, since the bootstrap alone covers only 0.76-0.85 at 3-4 trunks "
            "once trunks differ (docs/statistics.md). A row with fewer than 3 trunks is a pilot "
            "and gets no verdict. `states needed`: states at this design that would settle a "
            "not-settled row at the table's Bonferroni level with 80% power, from its measured "
            "mean and bootstrap spread; `trunks needed`: trunks of this size that the t-test "
            "over trunk means would need, from their measured sd. For a pilot row both are "
            "read at the level of a whole study that tests every directional row: orders of "
            "magnitude (with 2 trunks the spread is itself uncertain).", ""]
