"""Claim rows of the lag sweeps, each with the paper's or the peer's number beside ours.

Every comparison pairs the runs by seed (analysis/core/paired.py): held only when the paired 95%
interval excludes 0 in the stated direction. A claim whose sweep has not run yet is a
`no data` row naming the sweep, so the table shows what is missing.
"""

from __future__ import annotations

from dataclasses import asdict

import pandas as pd

from analysis.claims.verdicts import Claim, directed, paired
from analysis.core.final import alignment_note
from analysis.core.paired import UP
from analysis.core.search_ceiling import reach
from analysis.core.stats import fmt_ci, fmt_wilson, mean_ci
from analysis.core.style import BASELINE, PROPOSED

# A run whose held-out accuracy stays within this of on-policy training "matches" it
# (M2PO's claim); the margin is the eval's binomial noise at ~0.35 on 256 problems x 2.
MATCH_MARGIN = 0.05
# The peers the claims name beside the paper's baseline and proposed method (analysis/core/style.py).
CLIP_HIGHER, LARGE_LAG_PEER = "clip_higher", "m2po"
# The sweep that runs bapo (and cispo, not clip_higher) at the largest lag, 256-259.
LARGEST_LAG, LARGEST_LAG_SWEEP = "256", "large_lag_peers"


def _cell(s: pd.DataFrame, method: str, lag: str, anchor: str = "coupled") -> pd.DataFrame:
    return s[(s["method"] == method) & (s["lag"] == lag) & (s["anchor"] == anchor)]


def grid_sweep(lag: str) -> str:
    """The sweep of experiments/sweeps.yaml that runs the lag grid at `lag` (named by its low
    end; at 256-259 only bapo runs, beside large_lag's m2po and ppo)."""
    low = lag.split("-")[0]
    return LARGEST_LAG_SWEEP if low == LARGEST_LAG else f"lag{low}"


def _by_seed(cell: pd.DataFrame, col: str) -> pd.Series:
    return cell.set_index("seed")[col].astype(float)


def binding_lags(s: pd.DataFrame) -> list[str]:
    """Lags past the paper's staleness (delay queue) that ppo ran at, smallest first."""
    d = s[(s["source"] == "delay") & (s["method"] == BASELINE)]
    return list(d.sort_values("lag_low")["lag"].drop_duplicates())


def _compare(claim: str, paper: str, s: pd.DataFrame, a: tuple, b: tuple, col: str,
             direction: int, where: str) -> Claim:
    """a, b: (method, lag, anchor) cells; a - b paired by seed on `col`; `where` names the
    sweep that would run a missing cell."""
    c = Claim(claim, paper, f"paired {col} difference {'> 0' if direction == UP else '< 0'}")
    ca, cb = _cell(s, *a), _cell(s, *b)
    c.experiments = ", ".join(sorted(set(ca["experiment"]) | set(cb["experiment"])))
    if ca.empty or cb.empty:
        c.note = f"no runs of these cells here ({where})"
        return c
    c = paired(c, _by_seed(ca, col), _by_seed(cb, col), (_name(a), _name(b)), direction)
    return _with_note(c, alignment_note(ca, cb, (_name(a), _name(b))))


def _with_note(c: Claim, text: str) -> Claim:
    c.note = "; ".join(x for x in (c.note, text) if x)
    return c


def _name(cell: tuple) -> str:
    method, lag, anchor = cell
    return f"{method}{'' if anchor == 'coupled' else f' ({anchor})'} @ {lag}"


def lag_claims(s: pd.DataFrame, updates: pd.DataFrame) -> pd.DataFrame:
    """`s`: lag_summary rows; `updates`: steady updates of the bapo-objective runs (with
    `lag`, `method`, `rho0`)."""
    rows: list[Claim] = []
    lags = binding_lags(s)
    for lag in lags:
        ppo = _cell(s, BASELINE, lag)
        clip = ppo["steady_clip_frac"].mean() if "steady_clip_frac" in ppo else float("nan")
        where = f"lag {lag}, ppo clips {clip:.1%}" if clip == clip else f"lag {lag}"
        grid = grid_sweep(lag)
        # the largest lag's sweep runs bapo and cispo only: none has clip_higher there
        clip_grid = (f"`{grid}` runs bapo and cispo only; no sweep runs clip_higher here"
                     if grid == LARGEST_LAG_SWEEP else f"sweep `{grid}`")
        rows.append(_compare(
            f"bapo beats ppo at {where}",
            "4x AIME24: bapo 62.0 vs ppo 54.2 (Fig. 11)", s, (PROPOSED, lag, "coupled"),
            (BASELINE, lag, "coupled"), "final_greedy_acc", UP, f"sweep `{grid}`"))
        rows.append(_compare(
            f"bapo beats clip_higher at {where}",
            "4x AIME24: bapo 62.0 vs clip-higher 59.2 (Fig. 11)", s, (PROPOSED, lag, "coupled"),
            (CLIP_HIGHER, lag, "coupled"), "final_greedy_acc", UP, clip_grid))
        rows.append(_compare(
            f"raising c_high slows the entropy drop (clip_higher vs ppo, lag {lag})",
            "entropy stays higher with clip-higher (Sec. 3, Fig. 3)", s,
            (CLIP_HIGHER, lag, "coupled"), (BASELINE, lag, "coupled"), "entropy_drift", UP,
            clip_grid))
        rows.append(_reach_claim(updates, lag))
    for lag in lags:
        rows.append(_compare(
            f"decoupled beats naive (coupled) ppo at lag {lag}",
            "AReaL Table 3: naive degrades with staleness, decoupled stays near on-policy", s,
            (BASELINE, lag, "decoupled"), (BASELINE, lag, "coupled"), "final_greedy_acc", UP,
            "sweep `corrections`"))
    for lag in scenario_lags(s):
        rows.append(_compare(
            f"bapo beats ppo under {lag}", "BAPO targets off-policy settings such as sample "
            "replay and partial rollout (partial rollout: Sec. 5.3)", s,
            (PROPOSED, lag, "coupled"), (BASELINE, lag, "coupled"), "final_greedy_acc", UP,
            "sweep `scenarios`"))
    rows.append(_m2po_claim(s))
    return pd.DataFrame([asdict(c) for c in rows])


def scenario_lags(s: pd.DataFrame) -> list[str]:
    """The labels of the cells whose source mixes ages (replay, partial rollouts) that ppo
    ran in, by measured lag."""
    d = s[s["source"].isin(["replay", "partial"]) & (s["method"] == BASELINE)]
    return list(d.sort_values("lag_low")["lag"].drop_duplicates())


def _reach_claim(updates: pd.DataFrame, lag: str) -> Claim:
    """What Algorithm 1 promises: of the updates that start below rho0, the search reaches
    it wherever some bounds in its grid do (analysis/core/search_ceiling.py). Held when the
    reached share equals that ceiling, not held when it falls short. The search is
    deterministic given an update's tokens, so this is a count, not an estimate: no test,
    and no place among the rows Holm's correction counts."""
    u = updates if updates.empty else updates[(updates["method"] == PROPOSED)
                                              & (updates["lag"] == lag)]
    rho0 = f" = {float(u['rho0'].iloc[0]):g}" if len(u) and "rho0" in u else ""
    c = Claim(f"bapo's search reaches rho0{rho0} whenever its grid can (lag {lag})",
              "Alg. 1: widen the bounds until rho >= rho0, or stop at the grid's maximum; "
              "positive contribution 0.43-0.46 (Fig. 9)",
              "of the updates that start below rho0: share reached = share some bounds in the "
              "grid reach (the ceiling); counted over pooled updates")
    if u.empty:
        c.note = f"no bapo runs at this lag here (sweep `{grid_sweep(lag)}`)"
        return c
    c.experiments = ", ".join(sorted(set(u["experiment"])))
    r = reach(u)
    defined = u[u["outcome"] != "undefined"]
    ends = int((pd.to_numeric(defined["rho"], errors="coerce")
                >= pd.to_numeric(defined["rho0"])).sum())
    c.measured = (f"start below rho0: {fmt_wilson(r.below, r.updates)}; of those, the grid "
                  f"can reach it (ceiling): {fmt_wilson(r.ceiling, r.below)}; the search "
                  f"reached it: {fmt_wilson(r.reached, r.below)}")
    c.basis = f"reached {r.reached} of {r.ceiling} reachable ({r.below} below rho0)"
    c.value = r.reached / r.below if r.below else float("nan")
    counted = ("a count over pooled steady updates (Wilson intervals, descriptive: a run's "
               "updates are not independent), not a test: not among Holm's")
    if not r.readable:
        c.verdict, c.note = "not settled", "the ceiling cannot be read (value reading or grid unknown)"
    elif not r.below:
        c.verdict, c.note = "not settled", "no update started below rho0: nothing to reach"
    else:
        c.verdict = "held" if r.stopped_short == 0 else "not held"
        rest = ("the rest at the grid's maximum, below rho0" if r.stopped_short == 0 else
                f"{r.stopped_short} stopped short of the grid's end without reaching it")
        c.note = f"ends at rho >= rho0 in {ends} of {r.updates} updates, {rest}; {counted}"
    return c


def _m2po_claim(s: pd.DataFrame) -> Claim:
    """M2PO at the largest lag matches on-policy ppo: held when the paired difference's
    95% interval lies above -MATCH_MARGIN, not held when it lies below it."""
    c = Claim("m2po at the largest lag matches on-policy ppo",
              "M2PO: at 256 stale updates, accuracy matches on-policy training",
              f"paired final greedy accuracy difference > -{MATCH_MARGIN}")
    on = s[(s["method"] == BASELINE) & (s["lag"] == "0")]
    m2 = s[s["method"] == LARGE_LAG_PEER]
    if m2.empty or on.empty:
        c.note = ("no m2po runs here (sweep `large_lag`)" if m2.empty
                  else "no on-policy ppo control here")
        return c
    lag = m2.sort_values("lag_low")["lag"].iloc[-1]
    m2 = m2[m2["lag"] == lag]
    c.claim += f" (lag {lag})"
    d = _by_seed(m2, "final_greedy_acc").sub(_by_seed(on, "final_greedy_acc")).dropna()
    c.experiments = ", ".join(sorted(set(m2["experiment"]) | set(on["experiment"])))
    if not len(d):
        return c
    c = directed(c, d, -MATCH_MARGIN, UP)
    c = _with_note(c, alignment_note(m2, on, (f"m2po @ {lag}", "ppo @ 0")))
    # beside the paired interval, as the other rows: both cells, and the seeds on each side
    cells = " vs ".join(f"{name} {fmt_ci(*mean_ci(_by_seed(cell, 'final_greedy_acc')))}"
                        for name, cell in ((f"m2po @ {lag}", m2), ("ppo @ 0", on)))
    c.measured = (f"{cells}; paired m2po − on-policy ppo {c.measured} ({int((d > -MATCH_MARGIN).sum())}"
                  f" of {len(d)} seeds within {MATCH_MARGIN})")
    return c

