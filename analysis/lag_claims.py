"""Claim rows of the lag sweeps, each with the paper's or the peer's number beside ours.

Every comparison pairs the runs by seed (analysis/paired.py): held only when the paired 95%
interval excludes 0 in the stated direction. A claim whose sweep has not run yet is a
`no data` row naming the sweep, so the table shows what is missing.
"""

from __future__ import annotations

from dataclasses import asdict

import pandas as pd

from analysis.paired import UP
from analysis.stats import fmt_ci, mean_ci
from analysis.style import BASELINE, PROPOSED
from analysis.verdicts import Claim, directed, paired

# A run whose held-out accuracy stays within this of on-policy training "matches" it
# (M2PO's claim); the margin is the eval's binomial noise at ~0.35 on 256 problems x 2.
MATCH_MARGIN = 0.05
# "Keeps" the share: at least this share of updates end at rho >= rho0 (the search can
# fail only where no bounds in its grid reach rho0).
KEEP_SHARE = 0.95
# The peers the claims name beside the paper's baseline and proposed method (analysis/style.py).
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
    return paired(c, _by_seed(ca, col), _by_seed(cb, col), (_name(a), _name(b)), direction)


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
        rows.append(_share_claim(updates, lag))
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


def _share_claim(updates: pd.DataFrame, lag: str) -> Claim:
    """BAPO keeps the positive share at or above rho0 in (nearly) every update: per seed, the
    share of steady updates whose positive share after the search is >= rho0; held when the
    95% interval over seeds lies above KEEP_SHARE, not held when below it."""
    c = Claim(f"bapo keeps the positive share >= rho0 = 0.4 after its search (lag {lag})",
              "every update: the search widens the bounds until rho >= rho0 (Alg. 1); "
              "positive contribution 0.43-0.46 (Fig. 9)",
              f"per-seed share of updates ending at rho >= 0.4, interval above {KEEP_SHARE}")
    u = updates if updates.empty else updates[(updates["method"] == PROPOSED)
                                              & (updates["lag"] == lag)]
    if u.empty:
        c.note = f"no bapo runs at this lag here (sweep `{grid_sweep(lag)}`)"
        return c
    rho = pd.to_numeric(u["rho"], errors="coerce")
    kept = (rho >= 0.4).groupby(u["seed"]).mean()
    c.experiments = ", ".join(sorted(set(u["experiment"])))
    c = directed(c, kept, KEEP_SHARE, UP)
    before = (pd.to_numeric(u["rho_before"], errors="coerce") < 0.4).mean()
    c.note = "; ".join(x for x in (c.note, f"below 0.4 before the search: {before:.0%} of "
                                           f"updates; mean rho after it {rho.mean():.3f}") if x)
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
    # beside the paired interval, as the other rows: both cells, and the seeds on each side
    cells = " vs ".join(f"{name} {fmt_ci(*mean_ci(_by_seed(cell, 'final_greedy_acc')))}"
                        for name, cell in ((f"m2po @ {lag}", m2), ("ppo @ 0", on)))
    c.measured = (f"{cells}; paired m2po − on-policy ppo {c.measured} ({int((d > -MATCH_MARGIN).sum())}"
                  f" of {len(d)} seeds within {MATCH_MARGIN})")
    return c

