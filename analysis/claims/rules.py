"""Claim rows and their verdicts (docs/statistics.md).

Every claim states a direction: a number above a threshold, inside a range, or a
difference that rises or falls. `held` only when the 95% interval lies wholly on the
claim's side, `not held` only when it lies wholly on the other side, `not settled`
otherwise. Comparisons of two cells are judged on their paired difference by seed
(analysis/core/paired.py); the two unpaired intervals are shown beside it.

Each tested row also carries the two-sided p-value of the t-test its verdict rests on
(`p`) and the verdict its estimate leans to (`leans`), so that Holm's correction over a
table's rows (analysis/core/multiplicity.py) can say which verdicts survive it.

Shared by the paper-claims table (analysis/reports/paper.py), the random-reward rows
(analysis/reports/random_reward.py) and the lag claims (analysis/claims/lag.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pandas as pd

from analysis.core.paired import DOWN, UP, direction_verdict, fmt_paired, paired_difference
from analysis.core.stats import (
    NO_SPREAD,
    fmt_ci,
    fmt_wilson,
    mean_ci,
    mean_se,
    no_spread,
    score_p,
    t_sf,
    two_sided_p,
    wilson,
)

# `pilot`: a row resting on fewer than PILOT_SEEDS seeds gets no verdict (verdicts.table)
VERDICTS = ("held", "not held", "not settled", "pilot", "no data")
# The staleness levels the paper ran; 8x is shown but never decides a verdict.
PAPER_LEVELS = (1, 2, 4)


@dataclass
class Claim:
    claim: str
    paper: str
    criterion: str
    measured: str = "—"
    basis: str = "—"  # the interval the verdict rests on, in short (the summary shows it)
    experiments: str = ""  # the experiments whose runs the numbers come from
    value: float = math.nan  # the main measured number, for tests and CSV readers
    verdict: str = "no data"
    note: str = ""
    p: float = math.nan  # two-sided p of the t-test the verdict rests on; NaN: no test
    leans: str = ""  # the verdict the estimate points to, were its p small enough
    # why the row holds by construction (shown, neither counted nor tested); '' for evidence
    by_construction: str = ""
    key: str = ""  # the row's key (analysis/claims/schema.py Row.key)
    seeds: int = 0  # the seeds the verdict rests on (paired: the seeds both cells have)
    sd: float = math.nan  # sd over seeds of the paired differences (paired rows only)
    effect: float = math.nan  # the paper's effect as a difference (Row.effect); NaN: none


def ci(values: pd.Series) -> tuple[float, float, float, int, str]:
    m, lo, hi, n = mean_ci(values)
    return m, lo, hi, n, fmt_ci(m, lo, hi, n)


def no_interval(c: Claim, *lows: float) -> bool:
    if any(math.isnan(x) for x in lows):
        c.verdict, c.note = "not settled", "one seed: no interval"
        return True
    return False


def measured(c: Claim, values: pd.Series) -> tuple[float, float, float] | None:
    """Record the values' mean and 95% interval on the claim; (mean, low, high), or None
    when there is nothing to judge (no values, one seed, or seeds that all gave the same
    value: a t-interval of zero width; then `not settled`)."""
    m, low, high, n, text = ci(values)
    if not n:
        return None
    c.measured = c.basis = text
    c.value, c.seeds = m, n
    if no_interval(c, low):
        return None
    if no_spread(low, high, n):
        c.verdict, c.note = "not settled", f"{NO_SPREAD} (a count, not an estimate)"
        return None
    return m, low, high


def _lean(estimate: float, ref: float, direction: int) -> str:
    return "held" if (estimate - ref) * direction > 0 else "not held"


def threshold(c: Claim, values: pd.Series, above: float) -> Claim:
    """Held when the whole 95% interval lies above `above`, not held when below it."""
    return directed(c, values, above, UP)


def share_above(c: Claim, shares: pd.Series, k: int, n: int, above: float) -> Claim:
    """A share of updates above `above`: per seed, then a t-interval over the seeds' shares
    (threshold). Where every seed has the same share, the t-interval has no width; the
    verdict then rests on the Wilson interval of the k of n pooled updates, and says so."""
    threshold(c, shares, above)
    m, low, high, n_seeds = mean_ci(shares)
    if not no_spread(low, high, n_seeds) or not n:
        return c
    _, w_low, w_high = wilson(k, n)
    c.basis = f"{fmt_wilson(k, n)}; every seed {m:.3f}"
    c.measured = f"{c.measured}; pooled {fmt_wilson(k, n)}"
    c.verdict = direction_verdict(w_low, w_high, UP, above)
    c.p, c.leans = score_p(k, n, above), _lean(k / n, above, UP)
    c.note = (f"{NO_SPREAD} over seeds, so judged on the Wilson interval of the pooled "
              "updates (which counts them as independent)"
              + ("; it includes " + f"{above:g}" if c.verdict == "not settled" else ""))
    return c


def below(c: Claim, values: pd.Series, limit: float) -> Claim:
    """Held when the whole 95% interval lies below `limit`, not held when above it."""
    return directed(c, values, limit, DOWN)


def directed(c: Claim, values: pd.Series, ref: float, direction: int) -> Claim:
    """Held when the 95% interval lies wholly on `direction`'s side of `ref`."""
    interval = measured(c, values)
    if interval is None:
        return c
    m, low, high = interval
    c.verdict = direction_verdict(low, high, direction, ref)
    c.p, c.leans = two_sided_p(values, ref), _lean(m, ref, direction)
    if c.verdict == "not settled":
        c.note = f"95% interval includes {ref:g}"
    return c


def no_change(c: Claim, values: pd.Series) -> Claim:
    """A claim of no change: `not held` when the 95% interval excludes 0, else `not
    settled` (an interval holding 0 cannot show the absence of a change)."""
    interval = measured(c, values)
    if interval is None:
        return c
    _, low, high = interval
    c.p, c.leans = two_sided_p(values), "not held"  # no change can be shown, only a change
    if low > 0 or high < 0:
        c.verdict = "not held"
    else:
        c.verdict, c.note = "not settled", "95% interval includes 0; it cannot show no change"
    return c


def in_range(c: Claim, values: pd.Series, lo: float, hi: float) -> Claim:
    """Held when the whole 95% interval lies in [lo, hi], not held when it misses it."""
    interval = measured(c, values)
    if interval is None:
        return c
    m, low, high = interval
    c.p, c.leans = _range_p(values, lo, hi)
    if lo <= low and high <= hi:
        c.verdict = "held"
    elif high < lo or low > hi:
        c.verdict = "not held"
    else:
        inside = "inside" if lo <= m <= hi else "outside"
        c.verdict = "not settled"
        c.note = f"mean {inside} the range; its 95% interval reaches {'out of' if inside == 'inside' else 'into'} it"
    return c


def _range_p(values: pd.Series, lo: float, hi: float) -> tuple[float, str]:
    """(p, leans) of a range claim. Inside: both one-sided tests (mean > lo, mean < hi) must
    pass, p = 2 x the larger one-sided p; outside: the one-sided test that it lies beyond
    the nearer end, doubled. Either p is below 0.05 exactly when the 95% t-interval lies
    wholly inside (or wholly outside) the range, as the verdict asks."""
    m, se, n = mean_se(values)
    if not se > 0:
        return math.nan, ""
    if lo <= m <= hi:
        return min(1.0, 2.0 * max(t_sf((m - lo) / se, n - 1), t_sf((hi - m) / se, n - 1))), "held"
    beyond = (lo - m) if m < lo else (m - hi)
    return min(1.0, 2.0 * t_sf(beyond / se, n - 1)), "not held"


def paired(c: Claim, a: pd.Series, b: pd.Series, names: tuple[str, str], direction: int) -> Claim:
    """a - b paired by seed (the index of both): held when its 95% interval excludes 0 on
    `direction`'s side, not held when on the other side. The unpaired intervals of a and
    b are shown beside it."""
    _, _, _, na, ta = ci(a)
    _, _, _, nb, tb = ci(b)
    if not (na and nb):
        return c
    d = paired_difference(a, b)
    c.basis = f"{names[0]} − {names[1]} {fmt_paired(d, direction)}"
    c.measured = f"{names[0]} {ta} vs {names[1]} {tb}; paired {c.basis}"
    c.value, c.seeds, c.sd = d.mean, d.n, d.sd
    if not d.n:
        c.verdict, c.note = "not settled", "no seed in common: nothing to pair"
        return c
    if no_interval(c, d.low):
        return c
    if no_spread(d.low, d.high, d.n):
        c.verdict, c.note = "not settled", f"paired differences: {NO_SPREAD}"
        return c
    c.verdict = direction_verdict(d.low, d.high, direction)
    c.p, c.leans = d.p, _lean(d.mean, 0.0, direction)
    if c.verdict == "not settled":
        c.note = "paired 95% interval includes 0"
    return c


def _reason(c: Claim) -> str:
    """Why a row is not settled, without its confound note (reported on its own)."""
    if c.verdict != "not settled":
        return ""
    return "; ".join(x for x in c.note.split("; ") if x and not x.startswith("confound"))


def across_levels(c: Claim, parts: dict[int, Claim]) -> Claim:
    """One row from the same claim tested at each staleness level (`parts`): every level is
    shown, but only the paper's levels decide. Held when held at each of them, not held
    when not held at each, otherwise not settled."""
    shown = {k: p for k, p in sorted(parts.items()) if p.verdict != "no data"}
    if not shown:
        return c
    out = replace(c)
    out.measured = "; ".join(f"{k}x: {p.measured}" for k, p in shown.items())
    out.basis = "; ".join(f"{k}x: {p.basis}" for k, p in shown.items())
    deciding = {k: p for k, p in shown.items() if k in PAPER_LEVELS}
    verdicts = {p.verdict for p in deciding.values()}
    out.value = deciding[max(deciding)].value if deciding else math.nan
    out.seeds = min(p.seeds for p in (deciding or shown).values())
    per_level = ", ".join(f"{k}x {p.verdict}" + (f" ({_reason(p)})" if _reason(p) else "")
                          for k, p in shown.items())
    if not deciding:
        out.verdict, out.note = "not settled", f"no level the paper ran ({per_level})"
    elif verdicts == {"held"} or verdicts == {"not held"}:
        out.verdict = verdicts.pop()
        out.note = per_level if len(shown) > len(deciding) else ""
    else:
        out.verdict, out.note = "not settled", per_level
    out.p, out.leans = _levels_p(list(deciding.values()))
    extra = [k for k in shown if k not in PAPER_LEVELS]
    notes = [out.note] if out.note else []
    if extra:
        notes.append(", ".join(f"{k}x" for k in extra) + " not run in the paper: shown, not deciding")
    notes += [f"{k}x {x}" for k, p in deciding.items() for x in p.note.split("; ")
              if x.startswith("confound")]
    out.note = "; ".join(notes)
    return out


def _levels_p(deciding: list[Claim]) -> tuple[float, str]:
    """The row's p over its deciding levels: it is settled only when every level is settled
    the same way, so its p is the largest of theirs (an intersection-union test needs no
    correction within the row). Levels leaning different ways, or one without a test,
    cannot settle the row: p = 1, still counted among the table's tests."""
    tested = [p for p in deciding if not math.isnan(p.p)]
    if not tested:
        return math.nan, ""
    leans = {p.leans for p in deciding}
    if len(tested) < len(deciding) or len(leans) > 1:
        return 1.0, ""
    return max(p.p for p in tested), leans.pop()
