"""The lag sweeps' claims, as rows, and the table of one lag report's verdicts.

Every comparison pairs the runs by seed (analysis/core/paired.py): held only when the paired
95% interval excludes 0 in the stated direction. A row whose sweep has not run yet is a
`no data` row naming the sweep, so the table shows what is missing. The rows of `PER_LAG`
are tested at every lag of the delay queue that the reference method ran at; `DECOUPLED`
at each of those lags; `SCENARIO` under each source that mixes ages (replay, partial
rollouts); `LARGEST` once, at the largest lag its method ran.
"""

from __future__ import annotations

import pandas as pd

from analysis.claims import verdicts
from analysis.claims.paper import fig11_effect
from analysis.claims.quantities import values
from analysis.claims.rules import Claim
from analysis.claims.schema import (
    EACH,
    UP,
    Cell,
    Construction,
    Direction,
    Match,
    Reach,
    Row,
    Side,
)

REFERENCE = "ppo"  # what every lag row compares with: the paper's baseline
PROPOSED, PEER, LARGE_LAG_PEER = "bapo", "clip_higher", "m2po"
LARGEST = "largest"  # a cell's level: the largest lag its method ran at
# A run whose held-out accuracy stays within this of on-policy training "matches" it
# (M2PO's claim); the margin is the eval's binomial noise at ~0.35 on 256 problems x 2.
MATCH_MARGIN = 0.05
# The sweep that runs bapo (and cispo, not clip_higher) at the largest lag, 256-259.
LARGEST_LAG, LARGEST_LAG_SWEEP = "256", "large_lag_peers"
GREEDY, SAMPLED = "final_greedy_acc", "final_sampled_acc"  # the lag sweeps' primary first


def _vs(method: str, other: str, quantity: str = GREEDY, anchor: str = "coupled") -> tuple:
    return (Side(Cell(method, EACH, anchor), quantity), Side(Cell(other), quantity))


PER_LAG: tuple[Row, ...] = (
    Row("bapo_beats_ppo", "bapo beats ppo at {where}", "Fig. 11",
        "4x AIME24: bapo 62.0 vs ppo 54.2 (Fig. 11)", "paired final_greedy_acc difference > 0",
        _vs(PROPOSED, REFERENCE), Direction(UP), metric=GREEDY, also=SAMPLED,
        missing="no runs of these cells here (sweep `{grid}`)", effect=fig11_effect(REFERENCE)),
    Row("bapo_beats_clip_higher", "bapo beats clip_higher at {where}", "Fig. 11",
        "4x AIME24: bapo 62.0 vs clip-higher 59.2 (Fig. 11)",
        "paired final_greedy_acc difference > 0", _vs(PROPOSED, PEER), Direction(UP),
        metric=GREEDY, also=SAMPLED, missing="no runs of these cells here ({clip_grid})",
        effect=fig11_effect(PEER)),
    Row("clip_higher_entropy", "raising c_high slows the entropy drop (clip_higher vs ppo, lag {lag})",
        "Fig. 3", "entropy stays higher with clip-higher (Sec. 3, Fig. 3)",
        "paired entropy_drift difference > 0", _vs(PEER, REFERENCE, "entropy_drift"),
        Direction(UP), missing="no runs of these cells here ({clip_grid})"),
    Row("bapo_reaches_rho0", "bapo's search reaches rho0{rho0} whenever its grid can (lag {lag})",
        "Alg. 1", "Alg. 1: widen the bounds until rho >= rho0, or stop at the grid's maximum",
        "of the updates that start below rho0: share reached = share some bounds in the "
        "grid reach (the ceiling); counted over pooled updates",
        (Side(Cell(PROPOSED), "updates"),), Reach(),
        by_construction=Construction(
            "the search is deterministic and walks its grid to the end, so it reaches rho0 "
            "wherever the grid can: a check of the code (tests/algorithms/), not evidence "
            "about the paper's claims"),
        missing="no bapo runs at this lag here (sweep `{grid}`)"),
)
DECOUPLED = Row(
    "decoupled_beats_naive", "decoupled beats naive (coupled) ppo at lag {lag}", "AReaL Table 3",
    "AReaL Table 3: naive degrades with staleness, decoupled stays near on-policy",
    "paired final_greedy_acc difference > 0", _vs(REFERENCE, REFERENCE, anchor="decoupled"),
    Direction(UP), metric=GREEDY, also=SAMPLED, missing="no runs of these cells here (sweep `corrections`)")
SCENARIO = Row(
    "bapo_beats_ppo_mixed_ages", "bapo beats ppo under {lag}", "Sec. 5.3",
    "BAPO targets off-policy settings such as sample replay and partial rollout (partial "
    "rollout: Sec. 5.3)", "paired final_greedy_acc difference > 0", _vs(PROPOSED, REFERENCE),
    Direction(UP), metric=GREEDY, also=SAMPLED, missing="no runs of these cells here (sweep `scenarios`)")
LARGEST_ROW = Row(
    "m2po_matches_on_policy", "m2po at the largest lag matches on-policy ppo", "M2PO",
    "M2PO: at 256 stale updates, accuracy matches on-policy training",
    f"paired final greedy accuracy difference > -{MATCH_MARGIN}",
    (Side(Cell(LARGE_LAG_PEER, LARGEST), GREEDY), Side(Cell(REFERENCE, "0"), GREEDY)),
    Match(MATCH_MARGIN), metric=GREEDY)
ROWS: tuple[Row, ...] = (*PER_LAG, DECOUPLED, SCENARIO, LARGEST_ROW)


def grid_sweep(lag: str) -> str:
    """The sweep of experiments/sweeps.yaml that runs the lag grid at `lag` (named by its low
    end; at 256-259 only bapo runs, beside large_lag's m2po and ppo)."""
    low = lag.split("-")[0]
    return LARGEST_LAG_SWEEP if low == LARGEST_LAG else f"lag{low}"


def _name(cell: Cell, lag: str) -> str:
    return f"{cell.method}{'' if cell.anchor == 'coupled' else f' ({cell.anchor})'} @ {lag}"


class Lags:
    """One lag report's run summary (`s`: lag_summary rows) and the annotated steady updates
    of its searching runs, located by (method, lag, anchor)."""

    def __init__(self, s: pd.DataFrame, updates: pd.DataFrame):
        self.s, self.updates = s, updates

    def at(self, cell: Cell, lag: str) -> pd.DataFrame:
        s = self.s
        if cell.level == LARGEST:
            s = s[s["method"] == cell.method]
            lag = s.sort_values("lag_low")["lag"].iloc[-1] if len(s) else ""
        elif cell.level != EACH:
            lag = cell.level
        return s[(s["method"] == cell.method) & (s["lag"] == lag) & (s["anchor"] == cell.anchor)]

    def lags(self, sources: tuple[str, ...]) -> list[str]:
        """Lags of the reference method's runs from these sources, smallest first."""
        d = self.s[self.s["source"].isin(sources) & (self.s["method"] == REFERENCE)]
        return list(d.sort_values("lag_low")["lag"].drop_duplicates())

    def context(self, lag: str) -> dict[str, str]:
        """What a row's text and its `missing` note name at `lag`."""
        ref = self.at(Cell(REFERENCE), lag)
        clip = ref["steady_clip_frac"].mean() if "steady_clip_frac" in ref else float("nan")
        grid = grid_sweep(lag)
        u = self._bapo_updates(lag)
        return {
            "lag": lag, "grid": grid,
            "where": f"lag {lag}, {REFERENCE} clips {clip:.1%}" if clip == clip else f"lag {lag}",
            # the largest lag's sweep runs bapo and cispo only: none has clip_higher there
            "clip_grid": (f"`{grid}` runs bapo and cispo only; no sweep runs clip_higher here"
                          if grid == LARGEST_LAG_SWEEP else f"sweep `{grid}`"),
            "rho0": f" = {float(u['rho0'].iloc[0]):g}" if len(u) and "rho0" in u else ""}

    def _bapo_updates(self, lag: str) -> pd.DataFrame:
        u = self.updates
        return u if u.empty else u[(u["method"] == PROPOSED) & (u["lag"] == lag)]

    def judge(self, row: Row, lag: str) -> Claim:
        ctx = self.context(lag)
        c = verdicts.claim_of(row, row.claim.format(**ctx))
        if isinstance(row.test, Reach):
            u = self._bapo_updates(lag)
            if u.empty:
                return verdicts.add_note(c, row.missing.format(**ctx))
            return verdicts.constructed(
                verdicts.judge(c, row, verdicts.Measured([], [], (), updates=u)), row)
        frames = [self.at(side.cell, lag) for side in row.sides]
        c.experiments = ", ".join(sorted(set().union(*(set(f["experiment"]) for f in frames))))
        if not all(len(f) for f in frames):
            return verdicts.add_note(c, row.missing.format(**ctx))
        names = tuple(_name(side.cell, lag) for side in row.sides)
        m = verdicts.Measured(frames, [values(f, s.quantity) for f, s in zip(frames, row.sides,
                                                                             strict=True)], names,
                              confound="steady_grad_clipped",
                              also=[values(f, row.also) for f in frames] if row.also else [])
        return verdicts.judge(c, row, m)

    def judge_largest(self, row: Row) -> Claim:
        c = verdicts.claim_of(row)
        peer, on = (self.at(side.cell, "") for side in row.sides)
        if peer.empty or on.empty:
            return verdicts.add_note(c, f"no {row.sides[0].cell.method} runs here (sweep "
                                        "`large_lag`)" if peer.empty else
                                     f"no on-policy {REFERENCE} control here")
        lag = peer["lag"].iloc[0]
        c.claim += f" (lag {lag})"
        c.experiments = ", ".join(sorted(set(peer["experiment"]) | set(on["experiment"])))
        m = verdicts.Measured([peer, on], [values(peer, GREEDY), values(on, GREEDY)],
                              (f"{row.sides[0].cell.method} @ {lag}", f"{REFERENCE} @ 0"))
        return verdicts.judge(c, row, m)


def lag_claims(s: pd.DataFrame, updates: pd.DataFrame) -> pd.DataFrame:
    """`s`: lag_summary rows; `updates`: steady updates of the bapo-objective runs (with
    `lag`, `method`, `rho0`), annotated (analysis/core/search_ceiling.py)."""
    t = Lags(s, updates)
    delay = t.lags(("delay",))
    rows = [t.judge(row, lag) for lag in delay for row in PER_LAG]
    rows += [t.judge(DECOUPLED, lag) for lag in delay]
    rows += [t.judge(SCENARIO, lag) for lag in t.lags(("replay", "partial"))]
    rows.append(t.judge_largest(LARGEST_ROW))
    return pd.DataFrame([c.__dict__ for c in rows], columns=list(Claim.__dataclass_fields__))
