"""Which trunks a microscope study's design plans, and which of them are not in yet.

A study's `parts` (experiments/sweeps.yaml) are grids of trunk overrides, one trunk per
combination. The study is complete when every planned trunk is among the studies read: some
study's `trunk_overrides`, read on the keys the parts name, are exactly the planned ones (so
part 1's `seed=0` is not part 5's `seed=0` with `train.steps=18`). Only then is a row that is
still a pilot final (analysis/claims/microscope_expect.py).
"""

from __future__ import annotations

import itertools

from src.run_dir import override_value


def planned_trunks(parts: list[dict[str, list]]) -> list[frozenset[str]]:
    """Each planned trunk as its set of `key=value` overrides, part by part."""
    trunks = []
    for grid in parts:
        keys = list(grid)
        for values in itertools.product(*(grid[k] for k in keys)):
            trunks.append(frozenset(f"{k}={override_value(v)}" for k, v in zip(keys, values, strict=True)))
    return trunks


def missing_trunks(parts: list[dict[str, list]], meta: list[dict]) -> list[str]:
    """The planned trunks no study read has (each as its sorted overrides, space-separated)."""
    keys = {k for grid in parts for k in grid}
    present = {frozenset(o for o in m.get("trunk_overrides") or [] if o.split("=", 1)[0] in keys)
               for m in meta}
    return [" ".join(sorted(trunk)) for trunk in planned_trunks(parts) if trunk not in present]


def completeness_line(parts: list[dict[str, list]] | None, missing: list[str]) -> str:
    """One sentence for the report: how many planned trunks are in (`missing`: those of
    `missing_trunks`), and what that means."""
    if not parts:
        return ("The study's design (its `parts`) was not given, so no row's pilot status is "
                "taken as final.")
    planned = len(planned_trunks(parts))
    if not missing:
        return (f"All {planned} trunks the design plans are in: the study is complete, so a row "
                "still a pilot (or without data) is judged against its expectation as it stands.")
    return (f"{planned - len(missing)} of the {planned} trunks the design plans are in; a row "
            "that is a pilot now waits for the rest (" + "; ".join(f"`{m}`" for m in missing) + ").")
