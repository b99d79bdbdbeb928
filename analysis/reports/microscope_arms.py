"""REPORT.md's per-arm sections of a microscope study: each arm's means, where an adaptive
rule's bounds sat, and how a searching rule's search ended.

Each section gives one row per arm and mini-batch size: a study's parts may update on
different sizes (8 and 32 responses), and pooling them would mix two designs in one mean.
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd

from analysis.reports.markdown import fmt_effect


def by_arm(branches: pd.DataFrame) -> Iterator[tuple[str, pd.DataFrame]]:
    """(label, rows) per arm, and per mini-batch size where the table holds more than one:
    the label then names the size ('bapo, 32 a mini-batch')."""
    sizes = branches["minibatch"].nunique() if "minibatch" in branches else 1
    if sizes < 2:
        yield from ((str(arm), mine) for arm, mine in branches.groupby("arm"))
        return
    for (arm, size), mine in branches.groupby(["arm", "minibatch"]):
        yield f"{arm}, {size} a mini-batch", mine


def arm_summary(branches: pd.DataFrame) -> list[str]:
    """Per arm, means over its states: the readings, the mini-batch's numbers and the norm clip."""
    cols = ["d_entropy", "d_logp_correct", "kl", "positive_share", "clip_fraction",
            "clip_frac_low_pos", "grad_norm", "grad_clipped"]
    lines = ["| arm | states | d_entropy | d_logp_correct | KL | positive share | clip fraction "
             "| clip frac, low-p A>0 | grad norm | norm clip bound |", "|---" * 10 + "|"]
    for label, mine in by_arm(branches):
        means = mine[cols].astype(float).mean()
        lines.append(f"| {label} | {len(mine)} | " + " | ".join(fmt_effect(means[c]) for c in cols)
                     + " |")
    return lines


def bounds_distribution(branches: pd.DataFrame) -> list[str]:
    """Where each adaptive rule left its bounds (an arm whose bounds differ between states), as
    shares of the arm's states: not a mean, since such bounds pile up at the grid's limits."""
    lines = []
    for label, mine in by_arm(branches.dropna(subset=["c_low", "c_high"])):
        counts = mine.groupby(["c_low", "c_high"]).size().sort_values(ascending=False)
        if len(counts) < 2:
            continue  # fixed bounds
        lines += ["", f"| {label}: (c_low, c_high) | share of its {len(mine)} states |",
                  "|---|---|"]
        lines += [f"| ({lo:g}, {hi:g}) | {n / len(mine):.3f} |"
                  for (lo, hi), n in counts.head(8).items()]
    return lines or ["No arm moved its bounds between states."]


def search_outcomes(branches: pd.DataFrame) -> list[str]:
    """How each searching rule's search ended, as shares of its states: with no gradient at
    all (every advantage 0), at or above rho0 before any move, reached by moving, or not
    reached at the grid's end, and of those how many had no positive token to weigh (rho 0),
    which no bounds can fix. `bapo_reached` alone mixes the first move-free case with a
    reach."""
    rows = []
    searched = branches.dropna(subset=["bapo_steps"]) if "bapo_steps" in branches else branches[:0]
    for label, mine in by_arm(searched):
        moved, reached = mine["bapo_steps"] > 0, mine["bapo_reached"].astype(bool)
        if not (moved.any() or reached.any()):
            continue  # a rule with no search (its columns say 0 and False throughout)
        idle = mine["rho_before"].isna()
        short = moved & ~reached
        shares = [idle, ~idle & ~moved & reached, moved & reached, short,
                  short & (mine["rho_before"] == 0)]
        rows.append(f"| {label} | {len(mine)} | " + " | ".join(f"{s.mean():.3f}" for s in shares)
                    + " |")
    if not rows:
        return ["No searching rule among the arms."]
    return ["| arm | states | no gradient | at or above rho0 at the start | reached by the search "
            "| not reached at the grid's end | of which no A>0 token (rho 0) |",
            "|---|---|---|---|---|---|---|", *rows]
