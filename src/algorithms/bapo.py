"""BAPO's adaptive clipping bounds (Algorithm 1 of arXiv 2510.18927).

Two implementations with one signature:
- `adaptive_bounds_reference`: the literal while-loop, one tensor pass per candidate.
- `adaptive_bounds`: the same answer from a single pass. The loop visits a fixed
  sequence of (c_low, c_high) grid pairs, and each token is admitted (A>0) or filtered
  (A<0) at the first grid value that crosses its ratio, so bucketing tokens by that index
  and taking cumulative sums gives rho for every candidate at once.

`c_low`/`c_high` are absolute ratio bounds; rho is the positive tokens' share of the
policy-gradient magnitude (default) or of the surrogate value (literal Eq. 8).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from torch import Tensor

from src.algorithms._checks import as_bool_mask, broadcast_advantages, check_finite
from src.algorithms.surrogate import clipped_high, clipped_low

CONTRIBUTIONS = ("gradient", "value")
ORDERS = ("paper", "official")
WEIGHTINGS = (None, "uniform", "rollout_prob")
_GRID_TOL = 1e-9  # candidate <= bound comparisons; candidates are never accumulated
_TARGET_TOL = 1e-12  # rho >= rho0 up to summation-order rounding, same in both searches


@dataclass(frozen=True)
class BoundsResult:
    c_low: float
    c_high: float
    rho: float  # at the returned bounds; nan when undefined
    reached: bool  # rho >= rho0 at the returned bounds
    steps: int  # loop iterations taken (index of the returned pair in the visit order)
    rho_start: float = math.nan  # at the start bounds, before the search
    undefined: bool = False  # no loss-bearing token has A != 0: start bounds kept


def _grid(start: float, stop: float, step: float, *, clamp_last: bool) -> list[float]:
    # Same test as the reference loop's guard, `start + i*step <= stop + _GRID_TOL`
    # (an absolute tolerance), so both searches see the same candidates.
    count = max(0, math.floor((stop - start) / step))
    while start + (count + 1) * step <= stop + _GRID_TOL:
        count += 1
    while count > 0 and start + count * step > stop + _GRID_TOL:
        count -= 1
    values = [start + i * step for i in range(count + 1)]
    if clamp_last and values[-1] < stop - _GRID_TOL:
        values.append(stop)  # the official recipe clamps its last step to the max
    return values


@dataclass(frozen=True)
class BapoGrid:
    """What Algorithm 1 searches: the target rho0, the (c_low, c_high) grid, how rho is read
    and in which order the grid is walked. The defaults are the paper's (section 5.1); the
    method's parameters (src/algorithms/methods/bapo.py) take theirs from here.

    Checked once, when it is made: every search takes a grid, so none re-checks it.
    """

    rho0: float = 0.4
    low_start: float = 0.6
    low_max: float = 0.9
    high_start: float = 1.2
    high_max: float = 3.0
    high_step: float = 0.05
    low_step: float = 0.02
    contribution: str = "gradient"
    order: str = "paper"

    def __post_init__(self) -> None:
        check_grid(self)


def check_grid(g: BapoGrid) -> None:
    """The search's parameters; each message starts with the parameter it names."""
    if not 0.0 < g.rho0 < 1.0:
        raise ValueError(f"rho0 must be in (0, 1), got {g.rho0}")
    if not 0.0 < g.low_start <= g.low_max:
        raise ValueError(f"low_start: need 0 < low_start <= low_max, got low_start={g.low_start}, "
                         f"low_max={g.low_max}")
    if not g.high_start <= g.high_max:
        raise ValueError(f"high_start: need high_start <= high_max, got high_start={g.high_start}, "
                         f"high_max={g.high_max}")
    if not g.low_max < g.high_start:
        raise ValueError(f"low_max: need low_max < high_start so that c_low < c_high, got "
                         f"{g.low_max} >= {g.high_start}")
    if not (g.high_step > 0 and g.low_step > 0):
        name = "high_step" if not g.high_step > 0 else "low_step"
        raise ValueError(f"{name}: high_step and low_step must be > 0, got {g.high_step}, {g.low_step}")
    if g.contribution not in CONTRIBUTIONS:
        raise ValueError(f"contribution must be one of {list(CONTRIBUTIONS)}, got {g.contribution!r}")
    if g.order not in ORDERS:
        raise ValueError(f"order must be one of {list(ORDERS)}, got {g.order!r}")


def grid_from(source: object) -> BapoGrid:
    """The grid held by `source`'s same-named attributes (the method's parameters)."""
    return BapoGrid(**{f.name: getattr(source, f.name) for f in dataclasses.fields(BapoGrid)})


def _with_changes(grid: BapoGrid | None, changes: dict) -> BapoGrid:
    """`grid` (default: the paper's) with some of its values changed by keyword."""
    grid = BapoGrid() if grid is None else grid
    return dataclasses.replace(grid, **changes) if changes else grid


def _visit_order(n_low: int, n_high: int, order: str) -> list[tuple[int, int]]:
    """(low index, high index) pairs in the order Algorithm 1 (or the recipe) visits them."""
    if order == "paper":
        if n_low < 2:  # the loop guard `c_low + step_low <= b_low` fails at once
            return [(0, 0)]
        return [(0, i) for i in range(n_high)] + [(j, n_high - 1) for j in range(1, n_low)]
    return [(j, 0) for j in range(n_low)] + [(n_low - 1, i) for i in range(1, n_high)]


def token_weights(weights, like: Tensor, logp_behavior: Tensor | None) -> Tensor | None:
    if weights is None or (isinstance(weights, str) and weights == "uniform"):
        return None
    if isinstance(weights, str):
        if weights != "rollout_prob":
            raise ValueError(f"weights must be None, 'uniform', 'rollout_prob' or a tensor, got {weights!r}")
        if logp_behavior is None:
            raise ValueError("weights='rollout_prob' needs logp_behavior= (w_t = exp(logp_b))")
        weights = logp_behavior.detach().exp()
    if weights.shape != like.shape:
        raise ValueError(f"weights has shape {tuple(weights.shape)}, expected {tuple(like.shape)}")
    return weights


def _prepare(ratio, advantages, mask, weights, logp_behavior):
    mask = as_bool_mask(mask, ratio)
    check_finite("ratio", ratio, mask)
    advantages = broadcast_advantages(advantages, ratio)
    check_finite("advantages", advantages, mask)
    w = token_weights(weights, ratio, logp_behavior)
    r = ratio.detach().double()[mask]
    a = advantages.detach().double()[mask]
    w = torch.ones_like(r) if w is None else w.detach().double()[mask]
    return r, a, w


def _share(s_pos: Tensor, s_neg: Tensor) -> Tensor:
    total = s_pos + s_neg
    return torch.where(total > 0, s_pos / torch.where(total > 0, total, 1.0), 0.0)


def _sums(r: Tensor, a: Tensor, w: Tensor, c_low: float, c_high: float, contribution: str):
    pos, neg = a > 0, a < 0
    if contribution == "gradient":  # clipped tokens carry nothing (the clip states' boundary)
        s_pos = (w * r * a)[pos & ~clipped_high(r, a, c_high)].sum()
        s_neg = (w * r * -a)[neg & ~clipped_low(r, a, c_low)].sum()
    else:
        s_pos = (w * a * r.clamp(max=c_high))[pos].sum()
        s_neg = (w * -a * r.clamp(min=c_low))[neg].sum()
    return s_pos, s_neg


def contribution_sums(ratio, advantages, mask, c_low, c_high, *, contribution="gradient",
                      weights=None, logp_behavior=None) -> tuple[float, float]:
    """(S_pos, S_neg) under one reading; see docs/methods.md."""
    if contribution not in CONTRIBUTIONS:
        raise ValueError(f"contribution must be one of {CONTRIBUTIONS}, got {contribution!r}")
    r, a, w = _prepare(ratio, advantages, mask, weights, logp_behavior)
    s_pos, s_neg = _sums(r, a, w, float(c_low), float(c_high), contribution)
    return float(s_pos), float(s_neg)


def positive_contribution(ratio, advantages, mask, c_low, c_high, *, contribution="gradient",
                          weights=None, logp_behavior=None) -> float:
    """rho = S_pos / (S_pos + S_neg); nan if no masked token has A != 0."""
    if contribution not in CONTRIBUTIONS:
        raise ValueError(f"contribution must be one of {CONTRIBUTIONS}, got {contribution!r}")
    r, a, w = _prepare(ratio, advantages, mask, weights, logp_behavior)
    if not bool((a != 0).any()):
        return math.nan
    s_pos, s_neg = _sums(r, a, w, float(c_low), float(c_high), contribution)
    return float(_share(s_pos, s_neg))


def _meets(rho: float, rho0: float) -> bool:
    return rho >= rho0 - _TARGET_TOL


def adaptive_bounds_reference(ratio, advantages, mask, grid: BapoGrid | None = None, *,
                              weights=None, logp_behavior=None, **grid_changes) -> BoundsResult:
    """Algorithm 1 as printed: step c_high, then c_low, re-measuring rho each time.

    `grid`: the search (default: the paper's); `grid_changes` change some of its values.
    """
    g = _with_changes(grid, grid_changes)
    kw = dict(contribution=g.contribution, weights=weights, logp_behavior=logp_behavior)
    rho = positive_contribution(ratio, advantages, mask, g.low_start, g.high_start, **kw)
    if math.isnan(rho):
        return BoundsResult(g.low_start, g.high_start, rho, False, 0, rho, undefined=True)
    rho_start, i, j, steps = rho, 0, 0, 0
    c_low, c_high = g.low_start, g.high_start
    if g.order == "paper":
        while not _meets(rho, g.rho0) and g.low_start + (j + 1) * g.low_step <= g.low_max + _GRID_TOL:
            if g.high_start + (i + 1) * g.high_step <= g.high_max + _GRID_TOL:
                i += 1
            else:
                j += 1
            c_low, c_high = g.low_start + j * g.low_step, g.high_start + i * g.high_step
            rho = positive_contribution(ratio, advantages, mask, c_low, c_high, **kw)
            steps += 1
    else:  # the official verl recipe: c_low first, to its max, then c_high
        lows = _grid(g.low_start, g.low_max, g.low_step, clamp_last=True)
        highs = _grid(g.high_start, g.high_max, g.high_step, clamp_last=True)
        while not _meets(rho, g.rho0) and j + 1 < len(lows):
            j += 1
            c_low = lows[j]
            rho = positive_contribution(ratio, advantages, mask, c_low, c_high, **kw)
            steps += 1
        while not _meets(rho, g.rho0) and i + 1 < len(highs):
            i += 1
            c_high = highs[i]
            rho = positive_contribution(ratio, advantages, mask, c_low, c_high, **kw)
            steps += 1
    return BoundsResult(c_low, c_high, rho, _meets(rho, g.rho0), steps, rho_start)


def _bucket_sums(index: Tensor, values: Tensor, size: int) -> Tensor:
    """Sum of `values` per bucket 0..size (bucket `size`: never crosses a candidate)."""
    sums = torch.zeros(size + 1, dtype=values.dtype, device=values.device)
    return sums.index_add_(0, index, values)


def _before(index: Tensor, values: Tensor, size: int) -> Tensor:
    """For each candidate c: the sum of values whose bucket is <= c (already crossed)."""
    return _bucket_sums(index, values, size)[:size].cumsum(0)


def _after(index: Tensor, values: Tensor, size: int) -> Tensor:
    """For each candidate c: the sum of values whose bucket is > c (not crossed yet).

    Summed from the far end, never as total minus `_before`: with values of very different
    sizes (A = -2 next to A = -2e-24) that difference cancels the small ones to 0 and
    the fast search then disagreed with the literal loop.
    """
    sums = _bucket_sums(index, values, size)
    return sums.flip(0).cumsum(0).flip(0)[1:]


def _rho_table(r, a, w, lows: Tensor, highs: Tensor, contribution: str):
    """S_pos for every c_high candidate and S_neg for every c_low candidate, in one pass.

    The buckets follow the clip boundary of `surrogate.clipped_high/low`: an A>0 token is
    admitted at the first c_high with r <= c_high (not r > c_high), an A<0 token filtered
    at the first c_low with r < c_low. A token exactly at a candidate is unclipped there.
    """
    pos, neg = a > 0, a < 0
    r_pos, wa_pos = r[pos], (w * a)[pos]
    r_neg, wa_neg = r[neg], (w * -a)[neg]
    admit = torch.bucketize(r_pos, highs, right=False)  # first i with highs[i] >= r
    filt = torch.bucketize(r_neg, lows, right=True)  # first j with lows[j] > r
    n_high, n_low = highs.numel(), lows.numel()
    if contribution == "gradient":
        return _before(admit, wa_pos * r_pos, n_high), _after(filt, wa_neg * r_neg, n_low)
    # value: A*min(r, c_high) for A>0 and |A|*max(r, c_low) for A<0
    s_pos = _before(admit, wa_pos * r_pos, n_high) + highs * _after(admit, wa_pos, n_high)
    s_neg = _after(filt, wa_neg * r_neg, n_low) + lows * _before(filt, wa_neg, n_low)
    return s_pos, s_neg


def adaptive_bounds(ratio, advantages, mask, grid: BapoGrid | None = None, *, weights=None,
                    logp_behavior=None, **grid_changes) -> BoundsResult:
    """Same result as `adaptive_bounds_reference`, without a pass per candidate."""
    r, a, w = _prepare(ratio, advantages, mask, weights, logp_behavior)
    return search_tokens(r, a, w, _with_changes(grid, grid_changes))


def search_tokens(r: Tensor, a: Tensor, w: Tensor, grid: BapoGrid) -> BoundsResult:
    """The fast search on already-validated, masked, float64 1-D ratios/advantages/weights.

    For callers (the bapo objective) that have checked their inputs once already.
    """
    if not bool((a != 0).any()):
        return BoundsResult(grid.low_start, grid.high_start, math.nan, False, 0, math.nan,
                            undefined=True)
    clamp = grid.order == "official"
    low_values = _grid(grid.low_start, grid.low_max, grid.low_step, clamp_last=clamp)
    high_values = _grid(grid.high_start, grid.high_max, grid.high_step, clamp_last=clamp)
    lows = torch.tensor(low_values, dtype=torch.float64, device=r.device)
    highs = torch.tensor(high_values, dtype=torch.float64, device=r.device)
    s_pos, s_neg = _rho_table(r, a, w, lows, highs, grid.contribution)
    visits = torch.tensor(_visit_order(len(low_values), len(high_values), grid.order), device=r.device)
    rho = _share(s_pos[visits[:, 1]], s_neg[visits[:, 0]]).cpu()
    met = (rho >= grid.rho0 - _TARGET_TOL).nonzero()
    steps = int(met[0, 0]) if met.numel() else len(rho) - 1
    j, i = (int(x) for x in visits[steps])
    rho_at = float(rho[steps])
    return BoundsResult(low_values[j], high_values[i], rho_at, _meets(rho_at, grid.rho0), steps,
                        float(rho[0]))
