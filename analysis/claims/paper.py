"""The paper's claims, as rows, and the table of one suite's verdicts (REPORT.md).

Every number on the `paper` side is the paper's own (docs/methods.md); each row's test
holds the reference it is judged against. Rows whose cells are named `EACH` are tested at
every staleness level above 1x that their first side's method ran; only the paper's levels
decide (rules.across_levels). Two sides are compared paired by seed.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from analysis.claims import verdicts
from analysis.claims.quantities import MEASURES, conditions, values
from analysis.claims.rules import Claim
from analysis.claims.schema import (
    DOWN,
    EACH,
    UP,
    Cell,
    Construction,
    Direction,
    Row,
    Side,
    about,
    band,
)
from analysis.core.cells import experiment_order
from analysis.core.runs import RunSet

BASELINE, PROPOSED = "ppo", "bapo"  # the paper's baseline and the method it proposes
# Fig. 11's AIME24 accuracy at 4x (percent), the one comparison the paper gives in numbers.
FIG11_AIME24_4X = {"bapo": 62.0, "ppo": 54.2, "clip_higher": 59.2}


def fig11_effect(other: str) -> float:
    """bapo minus `other` in Fig. 11 at 4x, as a difference of accuracy in [0, 1]."""
    return round((FIG11_AIME24_4X[PROPOSED] - FIG11_AIME24_4X[other]) / 100, 10)


def _ppo(quantity: str, name: str = "", level=EACH) -> Side:
    return Side(Cell(BASELINE, level), quantity, name)


def _bapo(quantity: str, name: str = "", level=EACH) -> Side:
    return Side(Cell(PROPOSED, level), quantity, name)


def _beats(other: str, k: int, paper: str, effect: float | None = None) -> Row:
    return Row(f"bapo_beats_{other}_{k}x",
               f"bapo beats {other} at {k}x (final sampled accuracy, Fig 11)", "Fig. 11", paper,
               f"paired by seed: bapo minus {other} above 0",
               (_bapo("final_sampled_acc", "bapo", k),
                Side(Cell(other, k), "final_sampled_acc", other)), Direction(UP),
               metric="final_sampled_acc", also="final_greedy_acc", effect=effect)


def _fig7(method: str, text: str, paper: str, direction: int) -> Row:
    side = "above" if direction == UP else "below"
    return Row(f"fig7_{method}", f"{text} ({method} vs ppo at 4x, Fig 7)", "Fig. 7", paper,
               f"paired by seed: entropy drift of {method} minus ppo {side} 0",
               (Side(Cell(method, 4), "entropy_drift", method), _ppo("entropy_drift", "ppo", 4)),
               Direction(direction))


ROWS: tuple[Row, ...] = (
    Row("negative_contribution",
        "Negative tokens carry ~0.55-0.65 of the loss contribution (ppo, staleness > 1, Fig 4)",
        "Fig. 4", "~0.55-0.65 negative share",
        "95% interval of the negative share within [0.55, 0.65], the paper's range",
        (_ppo("negative_contribution"),), band(0.55, 0.65)),
    Row("negative_tokens", "Negative tokens are ~0.80 of the tokens (ppo, staleness > 1, Fig 4)",
        "Fig. 4", "~0.80 negative share",
        "95% interval of the negative token share within [0.75, 0.85] (the paper's ~0.80, "
        "read as ± 0.05 as every ~x)", (_ppo("token_share_neg"),), about(0.80)),
    Row("negative_longer",
        "Negative responses are longer than positive ones (ppo, staleness > 1, Fig 6)",
        "Fig. 6", "negative longer", "paired (same runs) length A<0 minus A>0 above 0",
        (_ppo("length_neg", "A<0"), _ppo("length_pos", "A>0")), Direction(UP),
        by_construction=Construction(
            "the ramble task makes 30% of the warm start's worked solutions searches that "
            "never stop, so failing responses run to the length cap and correct ones never do",
            when="ramble", measure="length_cap")),
    Row("clip_fraction_rises", "Staleness raises the clip fraction under ppo (Fig 2)", "Fig. 2",
        "rises with staleness", "paired by seed: clip fraction at kx minus 1x above 0",
        (_ppo("clip_frac", "{k}x"), _ppo("clip_frac", "1x", 1)), Direction(UP),
        by_construction=Construction(
            "at 1x every IS ratio is 1, so ppo's clip fraction there is 0 on every seed and kx "
            "minus 1x is above 0 whenever any token is clipped at kx")),
    Row("entropy_falls_faster", "Staleness speeds the entropy fall under ppo (Fig 2)", "Fig. 2",
        "faster fall when staler", "paired by seed: entropy drift at kx minus 1x below 0",
        (_ppo("entropy_drift", "{k}x"), _ppo("entropy_drift", "1x", 1)), Direction(DOWN)),
    Row("c_high", "BAPO c_high settles high (bapo, staleness > 1, Fig 8)", "Fig. 8", "~1.9-2.2",
        "95% interval of mean c_high within [1.9, 2.2]", (_bapo("c_high"),), band(1.9, 2.2)),
    Row("c_low", "BAPO c_low settles near 0.7 (bapo, staleness > 1, Fig 8)", "Fig. 8", "~0.7",
        "95% interval of mean c_low within [0.65, 0.75]", (_bapo("c_low"),), about(0.7)),
    Row("positive_contribution", "BAPO positive contribution (bapo, staleness > 1, Fig 9)",
        "Fig. 9", "~0.43-0.46", "95% interval within [0.43, 0.46]", (_bapo("pos_contrib"),),
        band(0.43, 0.46)),
    Row("bapo_raises_contribution",
        "BAPO raises the positive contribution over ppo (staleness > 1, Fig 9)", "Fig. 9",
        "bapo > ppo", "paired by seed: bapo minus ppo above 0",
        (_bapo("pos_contrib", "bapo"), _ppo("pos_contrib", "ppo")), Direction(UP)),
    _beats("ppo", 2, "bapo best (Fig 11)"),
    _beats("clip_higher", 2, "bapo best (Fig 11)"),
    _beats("ppo", 4, "AIME24 4x: 62.0 vs 54.2", fig11_effect("ppo")),
    _beats("clip_higher", 4, "AIME24 4x: 62.0 vs 59.2", fig11_effect("clip_higher")),
    _fig7("clip_0.8_1.5", "Raising c_high slows the entropy fall", "slower fall", UP),
    _fig7("clip_0.5_1.2", "Lowering c_low speeds the entropy fall", "faster fall", DOWN),
)


class Suite:
    """One suite's run summary, located by (method, staleness): the cells the rows read; with
    its runs, where a row's Construction holds and the numbers that show it."""

    def __init__(self, s: pd.DataFrame, runs: RunSet | None = None):
        self.s, self.runs = s, runs
        own = [] if runs is None else runs.select(lambda r: r.run_id in set(s["run_id"]))
        self.conditions = conditions(own)
        self.own = own

    def measure_text(self, row: Row) -> str:
        """The numbers of a row's Construction, over its first side's runs at every level."""
        built = row.by_construction
        if self.runs is None or built is None or not built.measure:
            return ""
        side = row.sides[0].cell
        chosen = [r for r in self.own if r.method == side.method
                  and (r.staleness > 1 if side.level == EACH else r.staleness == side.level)]
        return MEASURES[built.measure](self.runs, chosen) if chosen else ""

    def at(self, cell: Cell, k: int) -> pd.DataFrame:
        s = self.s
        if cell.experiment is not None:  # a cell named by its experiment, at its one level
            return s[(s["method"] == cell.method) & (s["experiment"] == cell.experiment)]
        level = k if cell.level == EACH else cell.level
        return s[(s["method"] == cell.method) & (s["staleness"] == level)]

    def stale(self, method: str) -> list[int]:
        s = self.s
        return sorted(int(k) for k in s.loc[s["method"] == method, "staleness"].unique() if k > 1)

    def experiments(self, row: Row) -> str:
        """The experiments of every cell the row reads, at every level it is tested at."""
        used = [self.at(side.cell, k) for side in row.sides
                for k in (self.stale(side.cell.method)
                          if side.cell.level == EACH and side.cell.experiment is None else [0])]
        used = [u for u in used if len(u)]
        if not used:
            return ""
        both = pd.concat(used)
        return ", ".join(experiment_order(set(zip(both["experiment"], both["staleness"],
                                                  strict=True))))

    def measure(self, row: Row, k: int) -> verdicts.Measured:
        frames = [self.at(side.cell, k) for side in row.sides]
        return verdicts.Measured(
            frames, [values(f, side.quantity) for f, side in zip(frames, row.sides, strict=True)],
            tuple((side.name or side.cell.method).format(k=k) for side in row.sides),
            confound="grad_clip_share", also=[values(f, row.also) for f in frames] if row.also
            else [])


def judge_row(suite: Suite, row: Row) -> Claim:
    c = verdicts.claim_of(row, experiments=suite.experiments(row))
    if not any(side.cell.level == EACH and side.cell.experiment is None for side in row.sides):
        c = verdicts.judge(c, row, suite.measure(row, 0))
    else:
        levels = suite.stale(row.sides[0].cell.method)
        c = verdicts.across_levels(
            c, {k: verdicts.judge(replace(c), row, suite.measure(row, k)) for k in levels})
    if row.by_construction is None or (row.by_construction.when != "always"
                                       and row.by_construction.when not in suite.conditions):
        return c
    return verdicts.constructed(c, row, suite.conditions, suite.measure_text(row))


def judge_declared_rows(suite: Suite, rows: tuple[Row, ...]) -> list[Claim]:
    """Each row judged; a row with no runs here says, in its note, which sweep makes them
    (`Row.missing`): the claim tables of one sweep each (mismatch, clip family, batch)."""
    claims = []
    for row in rows:
        c = judge_row(suite, row)
        if c.verdict == "no data":
            c.note = row.missing
        claims.append(c)
    return claims


def claims_table(s: pd.DataFrame, rows: tuple[Row, ...] = ROWS,
                 runs: RunSet | None = None) -> pd.DataFrame:
    """Each paper claim with the paper's number, ours, and a verdict, for the run summary
    `s` of one suite (analysis/core/cells.py): each (method, staleness) is one cell there,
    so "ppo at 4x" is one set of seeds. `runs` (the RunSet the summary is of) tells where a
    row holds by construction and shows why in numbers."""
    suite = Suite(s, runs)
    claims = [judge_row(suite, row) for row in rows]
    return pd.DataFrame([c.__dict__ for c in claims], columns=list(Claim.__dataclass_fields__))
