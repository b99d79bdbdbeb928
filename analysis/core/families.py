"""Pair runs within one CPU family.

Two CPU families (src/_numerics.py numerics_family) round differently from a run's first
update on, and 120 updates take two runs of one config and seed on two families as far apart
as two seeds (docs/numerics.md). A sweep made on one family is therefore paired with its
reference cells made on that family where they exist; the same cells made on another family
are set apart, to be shown beside the paired ones, never pooled with them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from analysis.core.runs import Run, RunSet


def within_family(runs: RunSet, is_sweep: Callable[[Run], bool],
                  key: Callable[[Run], Hashable]) -> tuple[RunSet, RunSet]:
    """(the runs to pair, the runs set apart). The sweep's runs (`is_sweep`) fix the families;
    a run of another family is set apart where a run of the sweep's families has its `key`
    (method, experiment, seed...), and kept where none has (the only partner there is)."""
    families = {r.numerics_family for r in runs.runs if is_sweep(r)}
    covered = {key(r) for r in runs.runs if r.numerics_family in families}
    apart = {r.run_id for r in runs.runs
             if r.numerics_family not in families and key(r) in covered}
    return (runs.subset(lambda r: r.run_id not in apart),
            runs.subset(lambda r: r.run_id in apart))


def family_names(runs: RunSet) -> list[str]:
    return sorted({r.numerics_family for r in runs.runs})
