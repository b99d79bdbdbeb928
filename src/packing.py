"""`train.pack`: a forward's rows split into length buckets, so that little of it is padding.

A batch of responses is as wide as its longest, so with lengths from 5 to 48 tokens a third
of a mini-batch's response positions can be padding, which every layer computes anyway. The
rows are sorted by length and cut into contiguous runs of that order; each run is one forward
as wide as its own longest row. `length_buckets` takes the fewest runs whose padding is at
most `max_padding` of their slots (an exact dynamic programme over the cut points, so no
cheaper cut into as many runs exists), and among cuts into that many, the least padding.

Each run's forward is the plain forward of its rows (attention never crosses rows), so the
numbers are the unsplit forward's up to float rounding: other batch shapes take other
kernels' summation orders. That is why it is opt-in.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor


def length_buckets(lengths: list[int], max_padding: float) -> list[list[int]]:
    """Row indices in buckets (each sorted longest first), the fewest buckets whose padded
    slots (rows x the bucket's longest length, minus the lengths) are at most `max_padding`
    of all their slots; lengths below 1 count as 1 (a forward scores at least one position)."""
    if not lengths:
        return []
    order = sorted(range(len(lengths)), key=lambda i: (-max(1, lengths[i]), i))
    sizes = np.array([max(1, lengths[i]) for i in order], dtype=np.int64)
    n, total = len(sizes), int(sizes.sum())
    prefix = np.concatenate([[0], np.cumsum(sizes)])
    # pad[i, j]: the padding of one bucket holding sorted rows i..j-1 (its longest is row i)
    starts = np.arange(n)[:, None]
    ends = np.arange(n + 1)[None, :]
    pad = np.where(ends > starts, (ends - starts) * sizes[:, None] - (prefix[None, :] - prefix[:n, None]),
                   np.iinfo(np.int64).max // 4)
    best = np.full(n + 1, np.iinfo(np.int64).max // 4)
    best[0] = 0
    cuts = []
    for _ in range(n):
        # best[j] with one bucket more: the cheapest split of rows 0..j-1 ending in bucket i..j-1
        candidates = best[:n, None] + pad
        cut = candidates.argmin(axis=0)
        best = candidates[cut, np.arange(n + 1)]
        best[0] = np.iinfo(np.int64).max // 4
        cuts.append(cut)
        if best[n] <= max_padding * (best[n] + total):
            break
    bounds, end = [], n
    for cut in reversed(cuts):
        start = int(cut[end])
        bounds.append((start, end))
        end = start
    return [[order[k] for k in range(a, b)] for a, b in reversed(bounds)]


def padding_share(lengths: list[int], buckets: list[list[int]]) -> float:
    """The share of the buckets' response slots that is padding."""
    slots = sum(len(b) * max(max(1, lengths[i]) for i in b) for b in buckets if b)
    used = sum(max(1, length) for length in lengths)
    return 1.0 - used / slots if slots else 0.0


def bucket_rows(lengths: Tensor, max_padding: float | None) -> list[Tensor]:
    """`length_buckets` of a batch's response lengths as index tensors; None: one bucket of
    every row, in order."""
    if max_padding is None:
        return [torch.arange(lengths.numel())]
    return [torch.tensor(b) for b in length_buckets(lengths.tolist(), max_padding)]


def gather_buckets(parts: list[Tensor], buckets: list[Tensor], t_len: int) -> Tensor:
    """The [B, t_len] batch of per-bucket outputs [b_i, t_i] (rows `buckets[i]`), each
    right-padded with 0, in the batch's row order (an index_select, so autograd sees it)."""
    if len(parts) == 1 and parts[0].shape[1] == t_len and bool(
            (buckets[0] == torch.arange(buckets[0].numel())).all()):
        return parts[0]
    device = parts[0].device
    order = torch.cat(buckets).to(device)
    back = torch.empty_like(order)
    back[order] = torch.arange(order.numel(), device=device)
    return torch.cat([F.pad(p, (0, t_len - p.shape[1])) for p in parts]).index_select(0, back)
