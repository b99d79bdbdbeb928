"""The microscope's claims (E1-E5), judged on its tables by the cluster bootstrap and the
t-interval over trunk means.

A claim row is declared before the study runs, in experiments/sweeps.yaml (the study's
`claims`), as data: which table (`branches`: one update; `horizons`: short-horizon
branches), which `metric`, which `arm`, and what it is compared with: another arm (`ref`,
the difference paired by state), another metric of the same arm (`metric_ref`), or nothing
(the level itself against `threshold`, default 0); `direction` up, down or none (a number to
report, not a test); the paper's prediction and the expectation written before the runs.

A state is (experiment, trunk, minibatch, seed, rollout[, update]); the bootstrap resamples trunk seeds,
then rollouts within them (analysis/core/cluster_bootstrap.py); a verdict also needs the
t-interval over the trunks' own means to exclude 0 on the same side. A row with fewer than
MIN_TRUNKS trunks is a pilot: its numbers are shown and it gets no verdict. Holm runs over
the table's tested rows (analysis/core/multiplicity.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from analysis.claims.microscope_expect import validate
from analysis.core.cluster_bootstrap import (
    Boot,
    cluster_bootstrap,
    states_needed,
    trunk_t,
    trunks_needed,
)
from analysis.core.multiplicity import ALPHA, with_holm

MIN_TRUNKS = 3
DIRECTIONS = {"up": 1, "down": -1, "none": 0}
KEYS = {"branches": ["experiment", "trunk", "minibatch", "seed", "rollout", "update"],
        "horizons": ["experiment", "trunk", "minibatch", "seed", "rollout"]}
FIELDS = ("id", "claim", "table", "metric", "arm", "direction", "paper", "expect")


@dataclass(frozen=True)
class Claim:
    id: str
    claim: str
    table: str
    metric: str
    arm: str
    direction: str
    paper: str
    expect: str
    ref: str | None = None
    metric_ref: str | None = None
    threshold: float = 0.0
    where: str | None = None  # a pandas query on the table first (e.g. "horizon > 0")
    # the prose `expect` transcribed into checks (analysis/claims/microscope_expect.py)
    expect_check: dict | None = None

    @classmethod
    def from_entry(cls, entry: dict) -> Claim:
        missing = [f for f in FIELDS if f not in entry]
        if missing:
            raise ValueError(f"microscope claim {entry.get('id', entry)}: missing {missing}")
        if entry["table"] not in KEYS or entry["direction"] not in DIRECTIONS:
            raise ValueError(f"microscope claim {entry['id']}: table must be one of {list(KEYS)} "
                             f"and direction one of {list(DIRECTIONS)}")
        return cls(**entry)

    @property
    def compared(self) -> str:
        if self.ref:
            return f"{self.arm} - {self.ref}"
        if self.metric_ref:
            return f"{self.metric} - {self.metric_ref} of {self.arm}"
        return f"{self.arm}" + (f" - {self.threshold:g}" if self.threshold else "")


def parse_claims(claims: list[dict]) -> tuple[list[Claim], dict[str, dict]]:
    """The study's claim rows and their expectation checks, each checked before any table is
    read: ValueError naming the first malformed row or check."""
    try:
        parsed = [Claim.from_entry(c) for c in claims]
    except TypeError as e:  # a key Claim does not have
        raise ValueError(f"experiments/sweeps.yaml: a microscope claim has an unknown key ({e})") from e
    checks = {c.id: c.expect_check for c in parsed if c.expect_check}
    validate(checks, {c.id for c in parsed})
    return parsed, checks


def differences(claim: Claim, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per state: the claim's compared quantity `value`, with the state's keys."""
    table = tables.get(claim.table)
    if table is None or table.empty:
        return pd.DataFrame(columns=[*KEYS[claim.table], "value"])
    if claim.where:
        table = table.query(claim.where)
    keys = KEYS[claim.table]
    mine = table[table["arm"] == claim.arm].set_index(keys)
    value = mine[claim.metric].astype(float)
    if claim.ref:
        other = table[table["arm"] == claim.ref].set_index(keys)[claim.metric].astype(float)
        value = value - other.reindex(value.index)
    elif claim.metric_ref:
        value = value - mine[claim.metric_ref].astype(float)
    else:
        value = value - claim.threshold
    return value.rename("value").dropna().reset_index()


def verdict(boot: Boot, direction: int) -> str:
    if boot.n == 0:
        return "no data"
    if boot.clusters < MIN_TRUNKS:
        return f"pilot ({boot.clusters} trunk{'s' if boot.clusters != 1 else ''})"
    if direction == 0:
        return "measured"
    # settled only where the bootstrap and the t-interval over trunk means agree: the
    # bootstrap alone covers 0.76-0.85 at 3-4 trunks once trunks differ (docs/statistics.md)
    t = trunk_t(boot)
    above, below = boot.low > 0 and t.low > 0, boot.high < 0 and t.high < 0
    if above or below:
        return "held" if above == (direction > 0) else "not held"
    return "not settled"


def judge(claims: list[Claim], tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Every claim's row: the mean, its bootstrap interval, the trunks' own means, the raw and
    Holm verdicts, and the states a not-settled row would need."""
    rows = []
    for c in claims:
        boot = cluster_bootstrap(differences(c, tables), "value")
        raw = verdict(boot, DIRECTIONS[c.direction])
        tested = raw in ("held", "not held", "not settled")
        t = trunk_t(boot)
        rows.append({"id": c.id, "claim": c.claim, "table": c.table, "compared": c.compared,
                     "metric": c.metric, "paper": c.paper, "expect": c.expect, "direction": c.direction,
                     "mean": boot.mean, "low": boot.low, "high": boot.high, "se": boot.se,
                     "t_low": t.low, "t_high": t.high,
                     "states": boot.n, "trunks": boot.clusters,
                     "agree": _agreeing(boot, DIRECTIONS[c.direction]),
                     # both tests must reject (intersection-union): the larger p is the row's
                     "p": max(boot.p, t.p) if tested else math.nan, "verdict": raw, "_boot": boot})
    out = with_holm(pd.DataFrame(rows))
    m = max(int(out["tests"].iloc[0]), 1) if len(out) else 1
    # a pilot row is not tested; how far it is from settled is read at the level it would
    # face in a whole study, where every directional row is tested
    planned = max(sum(1 for c in claims if DIRECTIONS[c.direction] != 0), 1)
    levels = [ALPHA / m if v == "not settled"
              else ALPHA / planned if v.startswith("pilot") and DIRECTIONS[d] != 0 else math.nan
              for v, d in zip(out["holm_verdict"], out["direction"], strict=True)]
    out["states_needed"] = [states_needed(b, a) if not math.isnan(a) else math.nan
                            for b, a in zip(out["_boot"], levels, strict=True)]
    out["trunks_needed"] = [trunks_needed(b, a) if not math.isnan(a) else math.nan
                            for b, a in zip(out["_boot"], levels, strict=True)]
    return out.drop(columns="_boot")


def _agreeing(boot: Boot, direction: int) -> str:
    if not boot.cluster_means:
        return ""
    sign = direction or (1 if boot.mean >= 0 else -1)
    k = sum(1 for m in boot.cluster_means if m * sign > 0)
    return f"{k} of {len(boot.cluster_means)}"
