"""What a claim row declares: the paper's figure and value, the cells compared, the quantity,
the test with its reference, and whether it holds by construction.

A row is data. Nothing here computes: analysis/claims/verdicts.py judges every row of
every table by the same rules (docs/statistics.md), and the reports draw their claim
tables from the rows of analysis/claims/paper.py, lag.py and random_reward.py. The rows
are the one place where analysis names methods: a figure that draws the cells a claim
compares reads them from its rows (`methods_of`), never from a name of its own.

One rule for every reference value: the paper's value is declared with the row, and the
row is judged against that value, never against a looser stand-in. A value the paper gives
as `~x` is the band [x - 0.05, x + 0.05] (`about`), as c_low's ~0.7 has always been read;
a range `a-b` is the band [a, b] (`band`); a comparison ("A beats B", "rises with
staleness") is the direction of a paired difference (`Direction`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

UP, DOWN = 1, -1  # the direction a number or a paired difference is expected to move

# A cell's level: a staleness (paper grid) or a lag label (lag sweeps), fixed by the row, or
# one of these, filled in as the row is expanded over the levels the runs have.
EACH = "each"  # every level of the table's expansion (the row is shown per level)
ANY = "*"  # any method: a row that applies to every cell (the random-reward Eq. 6 rows)
ABOUT = 0.05  # the half-width of the band a paper value `~x` is read as


@dataclass(frozen=True)
class Cell:
    """The runs one side of a row reads: one method label at one level (a staleness, or a
    lag label with its ratio anchor), or one experiment's cell."""

    method: str
    level: int | str = EACH
    anchor: str = "coupled"
    experiment: str | None = None


@dataclass(frozen=True)
class Side:
    """One cell and the per-run quantity read from it (a run-summary column or a function
    of analysis/claims/quantities.py), named as the row's text names it."""

    cell: Cell
    quantity: str
    name: str = ""


@dataclass(frozen=True)
class Band:
    """Held when the 95% interval lies wholly inside [low, high]; `reference` is the
    paper's value as read (the table shows it)."""

    low: float
    high: float
    reference: str = ""


def about(x: float, text: str = "") -> Band:
    """The paper's `~x`: the band [x - ABOUT, x + ABOUT]."""
    return Band(round(x - ABOUT, 10), round(x + ABOUT, 10), text or f"~{x:g}")


def band(low: float, high: float, text: str = "") -> Band:
    """The paper's range `low-high`."""
    return Band(low, high, text or f"{low:g}-{high:g}")


@dataclass(frozen=True)
class Direction:
    """Held when the 95% interval of the number (one side) or of the paired difference (two
    sides) lies wholly on `direction`'s side of `ref`."""

    direction: int
    ref: float = 0.0


@dataclass(frozen=True)
class NoChange:
    """A claim of no change: `not held` when the interval excludes 0, else `not settled`."""


@dataclass(frozen=True)
class ShareAbove:
    """Each seed's share of updates (the quantity) above `threshold`; where every seed has
    the same share, the Wilson interval of the pooled updates decides, and says so."""

    threshold: float


@dataclass(frozen=True)
class Reach:
    """BAPO's reach rate against its ceiling: an exact count over pooled updates (no test)."""


@dataclass(frozen=True)
class Match:
    """The paired difference a - b stays above -margin: `a` matches `b`."""

    margin: float


Test = Band | Direction | NoChange | ShareAbove | Reach | Match


@dataclass(frozen=True)
class Construction:
    """Why a row holds by construction, and where (`when`, a condition of
    analysis/claims/quantities.py CONDITIONS: `always`, or a property of the runs' config).
    Such a row is judged and shown, but it is no evidence: it is left out of the verdict
    counts and of Holm's tests."""

    why: str
    when: str = "always"
    measure: str = ""  # a function of quantities.MEASURES that shows it in numbers


@dataclass(frozen=True)
class Row:
    """One claim. `claim` may name `{k}`, `{lag}`, `{where}` and the like, filled in per
    level; `sides` holds one side (tested against the test's reference) or two (a - b,
    paired by seed)."""

    key: str
    claim: str
    figure: str
    paper: str
    criterion: str
    sides: tuple[Side, ...]
    test: Test
    by_construction: Construction | None = None
    metric: str = ""  # the primary metric, where the row tests an accuracy
    also: str = ""  # the other accuracy metric, shown beside the primary one
    missing: str = ""  # where a missing cell would come from (a sweep), for `no data` rows
    # The paper's value as a difference on the row's scale, where it gives one (Fig. 11's
    # 62.0 vs 54.2 on AIME24 is 0.078 of accuracy): the effect a seed count is sized to
    # detect (analysis/core/power.py). None where the paper names only a direction.
    effect: float | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def methods(self) -> tuple[str, ...]:
        """The method labels the row compares, in order, each once."""
        return tuple(dict.fromkeys(s.cell.method for s in self.sides if s.cell.method != ANY))


def methods_of(rows: tuple[Row, ...], figure: str) -> tuple[str, ...]:
    """The methods of every row that cites `figure` ('Fig. 7'), in the rows' order: what a
    figure drawing the paper's comparison draws."""
    found = [m for r in rows if r.figure == figure for m in r.methods]
    return tuple(dict.fromkeys(found))
