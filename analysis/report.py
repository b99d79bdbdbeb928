"""figures/REPORT.md: results per method and staleness, and the paper's claims checked.

Every number is computed here from the run dirs; nothing is typed in except the paper's
own numbers (methods.md) that the measurements are compared with.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis import random_reward, style
from analysis.cells import experiment_order
from analysis.loader import RunSet
from analysis.search_outcomes import search_outcomes
from analysis.stats import fmt_ci, mean_ci
from analysis.verdicts import VERDICTS, Claim, greater, in_range, no_interval, threshold

RESULT_COLUMNS = {
    "final_sampled_acc": "final sampled acc",
    "final_greedy_acc": "final greedy acc",
    "final_reward": "final reward",
    "entropy_drop": "entropy drop",
    "clip_frac": "clip frac",
    "clip_low_frac": "clip low frac",
    "clip_high_frac": "clip high frac",
    "rho": "rho (bapo)",
    "c_low": "c_low",
    "c_high": "c_high",
}


CELL_COLS = ["suite", "experiment", "method", "staleness"]


def results_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Long frame: one row per cell (suite, experiment, method, staleness) and metric ->
    mean, ci_low, ci_high, n over seeds. Only seeds of one cell are ever pooled here."""
    rows = []
    cols = [c for c in CELL_COLS if c in summary.columns]
    for key, g in summary.groupby(cols, sort=True):
        for col in RESULT_COLUMNS:
            m, lo, hi, n = mean_ci(g[col]) if col in g else (math.nan, math.nan, math.nan, 0)
            rows.append(
                {**dict(zip(cols, key, strict=True)), "staleness": int(g["staleness"].iat[0]),
                 "metric": col, "mean": m, "ci_low": lo, "ci_high": hi, "n": n}
            )
    return pd.DataFrame(rows, columns=[*cols, "metric", "mean", "ci_low", "ci_high", "n"])


# ------------------------------------------------------------------------------- claims


def _trend(c: Claim, s: pd.DataFrame, col: str) -> Claim:
    """Held when the highest staleness's 95% interval lies wholly above the lowest's."""
    by = {int(k): g[col] for k, g in s.groupby("staleness")}
    levels = sorted(k for k, v in by.items() if v.notna().any())
    if len(levels) < 2:
        return c
    stats = {k: mean_ci(by[k]) for k in levels}
    c.measured = ", ".join(
        f"{style.staleness_label(k)}: {fmt_ci(*stats[k])}".replace(f" (n={stats[k][3]})", "")
        for k in levels
    ) + f" (n={'/'.join(str(stats[k][3]) for k in levels)})"
    (m0, lo0, hi0, _), (m1, lo1, hi1, _) = stats[levels[0]], stats[levels[-1]]
    c.value = m1 - m0
    monotone = pd.Series([stats[k][0] for k in levels]).is_monotonic_increasing
    if no_interval(c, lo0, lo1):
        return c
    if lo1 > hi0:
        c.verdict = "held"
    elif hi1 < lo0:
        c.verdict = "not held"
    else:
        c.verdict = "not settled"
        ends = f"{style.staleness_label(levels[0])} and {style.staleness_label(levels[-1])}"
        c.note = f"95% intervals at {ends} overlap"
    c.note = "; ".join(x for x in ("means monotone" if monotone else "means not monotone", c.note) if x)
    return c


def _experiments(s: pd.DataFrame) -> str:
    pairs = set(zip(s["experiment"], s["staleness"], strict=True))
    return ", ".join(experiment_order(pairs))


def claims_table(s: pd.DataFrame) -> pd.DataFrame:
    """Each paper claim (methods.md) with the paper's number, ours, and a verdict.

    `s` is the run summary of one suite (analysis/cells.py): each (method, staleness) is one
    cell there, so "ppo at 4x" is one set of seeds. Rows marked "staleness > 1" pool that
    method's cells above 1x, and name the experiments they pool.
    """
    ppo, bapo = s[s["method"] == "ppo"], s[s["method"] == "bapo"]
    ppo_off, bapo_off = ppo[ppo["staleness"] > 1], bapo[bapo["staleness"] > 1]

    def at(method: str, k: int) -> pd.DataFrame:
        return s[(s["method"] == method) & (s["staleness"] == k)]

    def claim(text: str, paper: str, criterion: str, *used: pd.DataFrame) -> Claim:
        return Claim(text, paper, criterion, experiments=_experiments(pd.concat(used)))

    claims = [
        threshold(
            claim("Negative tokens carry most of the loss contribution (ppo, staleness > 1, Fig 4)",
                  "~0.55-0.65 negative share", "95% interval of the negative share above 0.5",
                  ppo_off),
            1.0 - ppo_off["pos_contrib"],
            0.5,
        ),
        threshold(
            claim("Negative tokens are most of the tokens (ppo, staleness > 1, Fig 4)",
                  "~0.80 negative share", "95% interval of the negative token share above 0.5",
                  ppo_off),
            ppo_off["token_share_neg"],
            0.5,
        ),
        greater(
            claim("Negative responses are longer than positive ones (ppo, staleness > 1, Fig 6)",
                  "negative longer", "95% intervals: length A<0 above A>0", ppo_off),
            ppo_off["length_neg"],
            ppo_off["length_pos"],
            ("A<0", "A>0"),
        ),
        _trend(
            claim("Staleness raises the clip fraction under ppo (Fig 2)", "rises with staleness",
                  "95% intervals: highest staleness above lowest", ppo),
            ppo,
            "clip_frac",
        ),
        _trend(
            claim("Staleness speeds the entropy drop under ppo (Fig 2)", "faster drop when staler",
                  "95% intervals: entropy drop at highest staleness above lowest", ppo),
            ppo,
            "entropy_drop",
        ),
        in_range(
            claim("BAPO c_high settles high (bapo, staleness > 1, Fig 8)", "~1.9-2.2",
                  "95% interval of mean c_high within [1.9, 2.2]", bapo_off),
            bapo_off["c_high"],
            1.9,
            2.2,
        ),
        in_range(
            claim("BAPO c_low settles near 0.7 (bapo, staleness > 1, Fig 8)", "~0.7",
                  "95% interval of mean c_low within [0.65, 0.75]", bapo_off),
            bapo_off["c_low"],
            0.65,
            0.75,
        ),
        in_range(
            claim("BAPO positive contribution (bapo, staleness > 1, Fig 9)", "~0.43-0.46",
                  "95% interval within [0.43, 0.46]", bapo_off),
            bapo_off["pos_contrib"],
            0.43,
            0.46,
        ),
        greater(
            claim("BAPO raises the positive contribution over ppo (staleness > 1, Fig 9)",
                  "bapo > ppo", "95% intervals: bapo above ppo", bapo_off, ppo_off),
            bapo_off["pos_contrib"],
            ppo_off["pos_contrib"],
            ("bapo", "ppo"),
        ),
    ]
    for k in (2, 4):
        for other, paper in (("ppo", "62.0 vs 54.2"), ("clip_higher", "62.0 vs 59.2")):
            paper = f"AIME24 4x: {paper}" if k == 4 else "bapo best (Fig 11)"
            claims.append(
                greater(
                    claim(f"bapo beats {other} at {k}x (final sampled accuracy, Fig 11)", paper,
                          f"95% intervals: bapo above {other}", at("bapo", k), at(other, k)),
                    at("bapo", k)["final_sampled_acc"],
                    at(other, k)["final_sampled_acc"],
                    ("bapo", other),
                )
            )
    claims += [
        greater(
            claim("Raising c_high slows the entropy drop (clip_0.8_1.5 vs ppo at 4x, Fig 7)",
                  "slower drop", "95% intervals: entropy drop of ppo above clip_0.8_1.5",
                  at("ppo", 4), at("clip_0.8_1.5", 4)),
            at("ppo", 4)["entropy_drop"],
            at("clip_0.8_1.5", 4)["entropy_drop"],
            ("ppo", "clip_0.8_1.5"),
        ),
        greater(
            claim("Lowering c_low speeds the entropy drop (clip_0.5_1.2 vs ppo at 4x, Fig 7)",
                  "faster drop", "95% intervals: entropy drop of clip_0.5_1.2 above ppo",
                  at("clip_0.5_1.2", 4), at("ppo", 4)),
            at("clip_0.5_1.2", 4)["entropy_drop"],
            at("ppo", 4)["entropy_drop"],
            ("clip_0.5_1.2", "ppo"),
        ),
    ]
    return pd.DataFrame([c.__dict__ for c in claims])


def verdict_counts(claims: pd.DataFrame) -> str:
    """'6 held, 2 not held, 7 not settled' (the kinds present, in VERDICTS order)."""
    counts = claims["verdict"].value_counts()
    return ", ".join(f"{counts[v]} {v}" for v in VERDICTS if v in counts) or "no claims"


# ----------------------------------------------------------------------------- markdown


def md_table(df: pd.DataFrame) -> str:
    cells = df.astype(str).map(lambda v: v.replace("|", "\\|").replace("\n", " "))
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(row) + " |" for row in cells.itertuples(index=False)]
    return "\n".join(lines)


def order_cells(df: pd.DataFrame, suites: list[str]) -> pd.DataFrame:
    """Rows by suite (largest first), experiment (by staleness), then the canonical method
    order: within one experiment the methods compared side by side."""
    rank = {m: i for i, m in enumerate(style.method_order(df["method"].unique()))}
    exps = experiment_order(set(zip(df["experiment"], df["staleness"], strict=True)))
    keys = {
        "suite": lambda c: c.map({x: i for i, x in enumerate(suites)}),
        "experiment": lambda c: c.map({x: i for i, x in enumerate(exps)}),
        "method": lambda c: c.map(rank),
    }
    by = [c for c in ("suite", "experiment", "method") if c in df.columns]
    return df.sort_values(by, key=lambda c: keys[c.name](c), kind="stable").reset_index(drop=True)


def _shown_cols(df: pd.DataFrame, suites: list[str]) -> pd.DataFrame:
    """The suite column only when there is more than one suite."""
    return df if len(suites) > 1 else df.drop(columns=["suite"], errors="ignore")


def results_markdown(results: pd.DataFrame, suites: list[str]) -> pd.DataFrame:
    """Wide table of formatted 'mean ± half-width (n)' cells, one row per cell."""
    r = results.assign(
        cell=[
            fmt_ci(m, lo, hi, n)
            for m, lo, hi, n in results[["mean", "ci_low", "ci_high", "n"]].itertuples(index=False)
        ]
    )
    wide = r.pivot(index=CELL_COLS, columns="metric", values="cell")
    wide = wide[[c for c in RESULT_COLUMNS if c in wide.columns]].rename(columns=RESULT_COLUMNS)
    wide = order_cells(wide.reset_index(), suites)
    wide["staleness"] = wide["staleness"].map(style.staleness_label)
    return _shown_cols(wide, suites)


def runs_markdown(summary: pd.DataFrame, suites: list[str]) -> pd.DataFrame:
    """One row per cell: how many seeds (which) and steps it has."""
    rows = []
    for key, g in summary.groupby(CELL_COLS, sort=False):
        seeds = sorted(g["seed"].astype(int))
        steps = sorted(set(g["steps_used"].astype(int)))
        rows.append({**dict(zip(CELL_COLS, key, strict=True)),
                     "seeds": f"{len(seeds)} ({', '.join(map(str, seeds))})",
                     "steps": "/".join(map(str, steps))})
    table = order_cells(pd.DataFrame(rows, columns=[*CELL_COLS, "seeds", "steps"]), suites)
    table["staleness"] = table["staleness"].map(style.staleness_label)
    return _shown_cols(table, suites)


@dataclass
class SuiteFigures:
    """Which figures of one suite were drawn, into which dir (relative to REPORT.md)."""

    suite: str
    where: str
    made: list[str]
    skipped: list[tuple[str, str]]


def _search_lines(table: pd.DataFrame, suites: list[str]) -> list[str]:
    """The BAPO search-outcome section (analysis/search_outcomes.py); none when empty."""
    if table.empty:
        return []
    shown = order_cells(table, suites)
    shown["staleness"] = shown["staleness"].map(style.staleness_label)
    first = list(shown.columns).index("n") + 1
    for col in shown.columns[first:]:
        shown[col] = shown[col].map(lambda v: f"{v:.3f}")
    return [
        "## How the BAPO search ended",
        "",
        "Share of update records (all seeds of a cell pooled) by how the bound search ended: "
        "`at start` (rho >= rho0 at the start bounds), `moved, reached`, `not reached` (the "
        "whole grid tried, bounds left at the max), `undefined` (no token with A != 0). `rho "
        "before`/`after`: mean positive contribution before and after the search. Update 0 "
        "of a rollout is on-policy: nothing can be clipped there, so its rho is the batch's "
        "own sign balance.",
        "",
        md_table(_shown_cols(shown, suites)),
        "",
    ]


def _random_reward_lines(runs: RunSet, summary: pd.DataFrame, last_k: int) -> list[str]:
    """The random-reward section (analysis/random_reward.py); none without such runs."""
    if not random_reward.random_suites(runs):
        return []
    table = random_reward.cell_table(runs, summary, last_k)
    return ["## Random-reward experiment", "", random_reward.intro(last_k), "", md_table(table), ""]


def _claims_lines(claims: pd.DataFrame, suites: list[str]) -> list[str]:
    lines = [
        "## Paper claims",
        "",
        "A claim is `held` or `not held` only when the 95% intervals settle it: the interval "
        "lies wholly on one side of the threshold, inside or outside the range, or the two "
        "compared intervals do not overlap. Otherwise it is `not settled`, whatever the means "
        "say; the note gives the reason. `no data`: the runs it needs are missing. Rows marked "
        "'staleness > 1' pool that method's cells above 1x (the experiments column names "
        "them), so their n counts runs (seeds x staleness levels).",
        "",
    ]
    cols = ["claim", "paper", "measured", "experiments", "criterion", "verdict", "note"]
    for suite in suites:
        part = claims[claims["suite"] == suite]
        if len(suites) > 1:
            lines += [f"### Suite: {suite}", ""]
        lines += [f"Verdicts: {verdict_counts(part)}.", ""]
        if (part["verdict"] == "no data").all():
            lines += ["No claim has the runs it needs in this suite.", ""]
            continue
        lines += [md_table(part[cols]), ""]
    return lines


def _figure_lines(runs: RunSet, figures: list[SuiteFigures]) -> list[str]:
    lines = ["## Figures", "", *_sampling_lines(runs)]
    for f in figures:
        if len(figures) > 1:
            lines += [f"Suite {f.suite}: in `{f.where}`", ""]
        lines += [f"- made `{n}`" for n in f.made]
        lines += [f"- skipped `{n}`: {why}" for n, why in f.skipped]
        lines += [""]
    return lines


def _sampling_lines(runs: RunSet) -> list[str]:
    """Says which token-level numbers come from a sample of responses, if any do."""
    fractions = sorted({r.token_sample_fraction for r in runs.runs if r.token_sample_fraction})
    if not fractions:
        return []
    sampled = sum(r.token_sample_fraction is not None for r in runs.runs)
    shares = ", ".join(f"{f:g}" for f in fractions)
    return [
        f"Token rows of {sampled} of {len(runs.runs)} runs are a seeded sample of whole "
        f"responses (share kept: {shares}; meta.json `export`). Figures and numbers drawn "
        "from token rows (Fig 5, Fig 10 and the entropy-quadrant figure) "
        "are estimates from that sample; everything from metrics.jsonl is exact.",
        "",
    ]


def write_report(
    runs: RunSet,
    summary: pd.DataFrame,
    out: Path,
    roots: Iterable[str],
    figures: list[SuiteFigures],
    last_k: int,
) -> tuple[Path, pd.DataFrame, pd.DataFrame]:
    suites = runs.suites
    results = order_cells(results_table(summary), suites)
    coin_flips = set(random_reward.random_suites(runs))
    claims = pd.concat(
        [(random_reward.suite_claims(runs, suite, last_k) if suite in coin_flips
          else claims_table(summary[summary["suite"] == suite])).assign(suite=suite)
         for suite in suites],
        ignore_index=True,
    )
    claims = claims[["suite", *[c for c in claims.columns if c != "suite"]]]
    out.mkdir(parents=True, exist_ok=True)
    results.to_csv(out / "results.csv", index=False)
    claims.to_csv(out / "claims.csv", index=False)
    search = search_outcomes(runs)
    if not search.empty:
        search = order_cells(search, suites)
        search.to_csv(out / "bapo_search.csv", index=False)
    several = (
        [f"The runs form {len(suites)} suites (analysis/cells.py: cells that differ only in "
         "method, staleness and experiment name can be compared); each has its own figures "
         "and claims: " + "; ".join(f"`{x}`" for x in suites) + ".", ""]
        if len(suites) > 1 else []
    )
    text = [
        "# Reproduction report",
        "",
        f"Made by `analysis/make_figures.py` from {len(runs.runs)} runs under "
        + ", ".join(f"`{r}`" for r in roots)
        + ". Every number is computed from the run dirs. A cell is one experiment, one method "
        "and one value of every config key that changes the numbers; only its seeds are "
        "pooled. `±` is the half-width of a 95% Student-t interval over seeds; `n` is the "
        "number of seeds.",
        "",
        *several,
        "## Runs (one row per cell)",
        "",
        md_table(runs_markdown(summary, suites)),
        "",
        "## Results",
        "",
        f"final accuracy: last eval record. final reward: mean `reward_mean` of the last "
        f"{last_k} steps. entropy drop: `entropy_mean` of the first step minus the mean of the "
        f"last {last_k} steps. clip fractions, rho, c_low, c_high: mean over all steps (rho of "
        "bapo-objective runs only; fixed-clip methods show their fixed bounds).",
        "",
        md_table(results_markdown(results, suites)) if len(results) else "no runs",
        "",
        *_random_reward_lines(runs, summary, last_k),
        *_claims_lines(claims, suites),
        *_search_lines(search, suites),
        *_figure_lines(runs, figures),
        "## Data problems",
        "",
        *([f"- {m}" for m in runs.messages] or ["none"]),
        "",
    ]
    path = out / "REPORT.md"
    path.write_text("\n".join(text))
    return path, results, claims
