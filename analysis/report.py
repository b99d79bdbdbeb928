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

from analysis import style
from analysis.loader import RunSet
from analysis.search_outcomes import search_outcomes
from analysis.stats import fmt_ci, mean_ci

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


def results_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Long frame: method, staleness, metric -> mean, ci_low, ci_high, n over seeds."""
    rows = []
    for (method, k), g in summary.groupby(["method", "staleness"], sort=True):
        for col in RESULT_COLUMNS:
            m, lo, hi, n = mean_ci(g[col]) if col in g else (math.nan, math.nan, math.nan, 0)
            rows.append(
                dict(
                    method=method, staleness=int(k), metric=col, mean=m, ci_low=lo, ci_high=hi, n=n
                )
            )
    return pd.DataFrame(
        rows, columns=["method", "staleness", "metric", "mean", "ci_low", "ci_high", "n"]
    )


# ------------------------------------------------------------------------------- claims


@dataclass
class Claim:
    claim: str
    paper: str
    criterion: str
    measured: str = "—"
    value: float = math.nan  # the main measured number, for tests and CSV readers
    verdict: str = "no data"
    note: str = ""


def _ci(values: pd.Series) -> tuple[float, float, float, int, str]:
    m, lo, hi, n = mean_ci(values)
    return m, lo, hi, n, fmt_ci(m, lo, hi, n)


def _threshold(c: Claim, values: pd.Series, above: float) -> Claim:
    m, low, high, n, text = _ci(values)
    if n:
        c.measured, c.value = text, m
        c.verdict = "held" if m > above else "not held"
        if math.isnan(low):
            c.note = "one run: no interval"
        elif low <= above <= high:
            c.note = "95% interval includes the threshold"
    return c


def _in_range(c: Claim, values: pd.Series, lo: float, hi: float) -> Claim:
    m, low, high, n, text = _ci(values)
    if n:
        c.measured, c.value = text, m
        c.verdict = "held" if lo <= m <= hi else "not held"
        if math.isnan(low):
            c.note = "one run: no interval"
        elif low < lo or high > hi:
            c.note = "95% interval reaches outside the range"
    return c


def _greater(c: Claim, a: pd.Series, b: pd.Series, names: tuple[str, str]) -> Claim:
    """Held when mean(a) > mean(b); says so when the 95% intervals overlap."""
    ma, la, ha, na, ta = _ci(a)
    mb, lb, hb, nb, tb = _ci(b)
    if na and nb:
        c.measured = f"{names[0]} {ta} vs {names[1]} {tb}"
        c.value = ma - mb
        c.verdict = "held" if ma > mb else "not held"
        if not (math.isnan(la) or math.isnan(lb)) and la <= hb and lb <= ha:
            c.note = "95% intervals overlap"
        elif math.isnan(la) or math.isnan(lb):
            c.note = "one seed: no interval"
    return c


def _trend(c: Claim, s: pd.DataFrame, col: str) -> Claim:
    """Held when the seed-mean at the highest staleness exceeds the one at the lowest."""
    means = s.groupby("staleness")[col].mean().dropna().sort_index()
    if len(means) >= 2:
        c.measured = ", ".join(f"{style.staleness_label(k)}: {v:.3f}" for k, v in means.items())
        c.value = float(means.iloc[-1] - means.iloc[0])
        c.verdict = "held" if c.value > 0 else "not held"
        c.note = "monotone" if means.is_monotonic_increasing else "not monotone"
    return c


def claims_table(s: pd.DataFrame) -> pd.DataFrame:
    """Each paper claim (methods.md) with the paper's number, ours, and a verdict."""
    ppo, bapo = s[s["method"] == "ppo"], s[s["method"] == "bapo"]
    ppo_off, bapo_off = ppo[ppo["staleness"] > 1], bapo[bapo["staleness"] > 1]

    def at(method: str, k: int, col: str) -> pd.Series:
        return s.loc[(s["method"] == method) & (s["staleness"] == k), col]

    claims = [
        _threshold(
            Claim(
                "Negative tokens carry most of the loss contribution (ppo, staleness > 1, Fig 4)",
                "~0.55-0.65 negative share",
                "mean negative share > 0.5",
            ),
            1.0 - ppo_off["pos_contrib"],
            0.5,
        ),
        _threshold(
            Claim(
                "Negative tokens are most of the tokens (ppo, staleness > 1, Fig 4)",
                "~0.80 negative share",
                "mean negative token share > 0.5",
            ),
            ppo_off["token_share_neg"],
            0.5,
        ),
        _greater(
            Claim(
                "Negative responses are longer than positive ones (ppo, staleness > 1, Fig 6)",
                "negative longer",
                "mean length A<0 > A>0",
            ),
            ppo_off["length_neg"],
            ppo_off["length_pos"],
            ("A<0", "A>0"),
        ),
        _trend(
            Claim(
                "Staleness raises the clip fraction under ppo (Fig 2)",
                "rises with staleness",
                "highest staleness > lowest",
            ),
            ppo,
            "clip_frac",
        ),
        _trend(
            Claim(
                "Staleness speeds the entropy drop under ppo (Fig 2)",
                "faster drop when staler",
                "entropy drop at highest staleness > lowest",
            ),
            ppo,
            "entropy_drop",
        ),
        _in_range(
            Claim(
                "BAPO c_high settles high (bapo, staleness > 1, Fig 8)",
                "~1.9-2.2",
                "mean c_high in [1.9, 2.2]",
            ),
            bapo_off["c_high"],
            1.9,
            2.2,
        ),
        _in_range(
            Claim(
                "BAPO c_low settles near 0.7 (bapo, staleness > 1, Fig 8)",
                "~0.7",
                "mean c_low in [0.65, 0.75]",
            ),
            bapo_off["c_low"],
            0.65,
            0.75,
        ),
        _in_range(
            Claim(
                "BAPO positive contribution (bapo, staleness > 1, Fig 9)",
                "~0.43-0.46",
                "mean in [0.43, 0.46]",
            ),
            bapo_off["pos_contrib"],
            0.43,
            0.46,
        ),
        _greater(
            Claim(
                "BAPO raises the positive contribution over ppo (staleness > 1, Fig 9)",
                "bapo > ppo",
                "mean bapo > ppo",
            ),
            bapo_off["pos_contrib"],
            ppo_off["pos_contrib"],
            ("bapo", "ppo"),
        ),
    ]
    for k in (2, 4):
        for other, paper in (("ppo", "62.0 vs 54.2"), ("clip_higher", "62.0 vs 59.2")):
            paper = f"AIME24 4x: {paper}" if k == 4 else "bapo best (Fig 11)"
            claims.append(
                _greater(
                    Claim(
                        f"bapo beats {other} at {k}x (final sampled accuracy, Fig 11)",
                        paper,
                        f"mean bapo > {other}",
                    ),
                    at("bapo", k, "final_sampled_acc"),
                    at(other, k, "final_sampled_acc"),
                    ("bapo", other),
                )
            )
    claims += [
        _greater(
            Claim(
                "Raising c_high slows the entropy drop (clip_0.8_1.5 vs ppo at 4x, Fig 7)",
                "slower drop",
                "entropy drop ppo > clip_0.8_1.5",
            ),
            at("ppo", 4, "entropy_drop"),
            at("clip_0.8_1.5", 4, "entropy_drop"),
            ("ppo", "clip_0.8_1.5"),
        ),
        _greater(
            Claim(
                "Lowering c_low speeds the entropy drop (clip_0.5_1.2 vs ppo at 4x, Fig 7)",
                "faster drop",
                "entropy drop clip_0.5_1.2 > ppo",
            ),
            at("clip_0.5_1.2", 4, "entropy_drop"),
            at("ppo", 4, "entropy_drop"),
            ("clip_0.5_1.2", "ppo"),
        ),
    ]
    return pd.DataFrame([c.__dict__ for c in claims])


# ----------------------------------------------------------------------------- markdown


def md_table(df: pd.DataFrame) -> str:
    cells = df.astype(str).map(lambda v: v.replace("|", "\\|").replace("\n", " "))
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(row) + " |" for row in cells.itertuples(index=False)]
    return "\n".join(lines)


def results_markdown(results: pd.DataFrame) -> pd.DataFrame:
    """Wide table of formatted 'mean ± half-width (n)' cells, methods in canonical order."""
    r = results.assign(
        cell=[
            fmt_ci(m, lo, hi, n)
            for m, lo, hi, n in results[["mean", "ci_low", "ci_high", "n"]].itertuples(index=False)
        ]
    )
    wide = r.pivot(index=["method", "staleness"], columns="metric", values="cell")
    wide = wide[[c for c in RESULT_COLUMNS if c in wide.columns]].rename(columns=RESULT_COLUMNS)
    order = {m: i for i, m in enumerate(style.method_order(results["method"].unique()))}
    wide = wide.reset_index()
    wide = wide.sort_values(
        ["method", "staleness"], key=lambda c: c.map(order) if c.name == "method" else c
    )
    wide["staleness"] = wide["staleness"].map(style.staleness_label)
    return wide


def _search_lines(table: pd.DataFrame) -> list[str]:
    """The BAPO search-outcome section (analysis/search_outcomes.py); none when empty."""
    if table.empty:
        return []
    shown = table.copy()
    shown["staleness"] = shown["staleness"].map(style.staleness_label)
    for col in shown.columns[4:]:
        shown[col] = shown[col].map(lambda v: f"{v:.3f}")
    return [
        "## How the BAPO search ended",
        "",
        "Share of update records (all seeds pooled) by how the bound search ended: `at "
        "start` (rho >= rho0 at the start bounds), `moved, reached`, `not reached` (the whole "
        "grid tried, bounds left at the max), `undefined` (no token with A != 0). `rho "
        "before`/`after`: mean positive contribution before and after the search. Update 0 "
        "of a rollout is on-policy: nothing can be clipped there, so its rho is the batch's "
        "own sign balance.",
        "",
        md_table(shown),
        "",
    ]


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
    made: list[str],
    skipped: list[tuple[str, str]],
    last_k: int,
) -> tuple[Path, pd.DataFrame, pd.DataFrame]:
    results, claims = results_table(summary), claims_table(summary)
    out.mkdir(parents=True, exist_ok=True)
    results.to_csv(out / "results.csv", index=False)
    claims.to_csv(out / "claims.csv", index=False)
    search = search_outcomes(runs)
    if not search.empty:
        search.to_csv(out / "bapo_search.csv", index=False)
    counts = summary.pivot_table(
        index="method", columns="staleness", values="seed", aggfunc="count", fill_value=0
    )
    counts = counts.reindex(style.method_order(counts.index))
    counts.columns = [style.staleness_label(k) for k in counts.columns]
    text = [
        "# Reproduction report",
        "",
        f"Made by `analysis/make_figures.py` from {len(runs.runs)} runs under "
        + ", ".join(f"`{r}`" for r in roots)
        + ". Every number is computed from the run dirs. `±` is the half-width of a 95% "
        "Student-t interval over seeds; `n` is the number of seeds.",
        "",
        "## Runs (seeds per method and staleness)",
        "",
        md_table(counts.reset_index()),
        "",
        "## Results",
        "",
        f"final accuracy: last eval record. final reward: mean `reward_mean` of the last "
        f"{last_k} steps. entropy drop: `entropy_mean` of the first step minus the mean of the "
        f"last {last_k} steps. clip fractions, rho, c_low, c_high: mean over all steps (rho of "
        "bapo-objective runs only; fixed-clip methods show their fixed bounds).",
        "",
        md_table(results_markdown(results)) if len(results) else "no runs",
        "",
        "## Paper claims",
        "",
        "Rows marked 'staleness > 1' pool every such staleness, so their n counts runs "
        "(seeds x staleness levels). A claim is held when its criterion is met by the means; "
        "'no data' when the runs it needs are missing. The note says when the 95% "
        "interval does not settle the verdict.",
        "",
        md_table(claims[["claim", "paper", "measured", "criterion", "verdict", "note"]]),
        "",
        *_search_lines(search),
        "## Figures",
        "",
        *_sampling_lines(runs),
        *[f"- made `{n}`" for n in made],
        *[f"- skipped `{n}`: {why}" for n, why in skipped],
        "",
        "## Data problems",
        "",
        *([f"- {m}" for m in runs.messages] or ["none"]),
        "",
    ]
    path = out / "REPORT.md"
    path.write_text("\n".join(text))
    return path, results, claims
