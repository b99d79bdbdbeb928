"""Insight 2's table read within parts of a microscope study (exploratory: no split was in
the plan written before the runs, and no verdict is read from one): the thirds of the rollouts
branched (when in the trunk's training) and the thirds of the states by the entropy of their
mini-batch (the trunk's update record at that state: how spread the policy is on the tokens
the update trains on).

Every interval is the two-stage cluster bootstrap's (analysis/core/cluster_bootstrap.py).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.claims.microscope import KEYS
from analysis.core.style import save
from analysis.figures.microscope import CLASS_LABELS, CLASS_SIGNS, own_effects

STATE = KEYS["branches"]  # a state: (experiment, trunk, minibatch, seed, rollout, update)
# split name -> (its column, what a reader is told a group is)
SPLITS = {"phase": ("rollout", "rollouts"), "entropy": ("minibatch_entropy", "mini-batch entropy")}


def thirds(branches: pd.DataFrame, split: str) -> list[tuple[str, pd.DataFrame]]:
    """The rows of each third, in order: the rollouts sorted and split into three runs of
    near-equal length ('rollouts 0-8'), or the states sorted by their mini-batch entropy and
    split so ('mini-batch entropy 0.04-0.15'); none where the column is missing or empty."""
    column, label = SPLITS[split]
    if column not in branches or branches[column].isna().all():
        return []
    if split == "phase":
        groups = np.array_split(np.sort(branches["rollout"].unique()), 3)
        return [(f"{label} {g[0]}-{g[-1]}", branches[branches["rollout"].isin(g)])
                for g in groups if len(g)]
    states = branches.dropna(subset=[column]).drop_duplicates(STATE).sort_values([column, *STATE])
    out = []
    for g in np.array_split(np.arange(len(states)), 3):
        if len(g):
            chosen = states.iloc[g]
            keys = pd.MultiIndex.from_frame(chosen[STATE])
            rows = branches[pd.MultiIndex.from_frame(branches[STATE]).isin(keys)]
            out.append((f"{label} {chosen[column].iloc[0]:.2f}-{chosen[column].iloc[-1]:.2f}", rows))
    return out


def class_effects_by(branches: pd.DataFrame, split: str) -> pd.DataFrame:
    """Insight 2's classes' own effects on the entropy (mask - zero) within each third, with
    the zero arm's probe entropy before the update, the trunk's rollout entropy and the
    mini-batch entropy there (NaN where the study has no trunk metrics)."""
    masks = [f"mask:{c}" for c in CLASS_SIGNS]
    rows = []
    for group, part in thirds(branches[branches["arm"].isin([*masks, "zero"])], split):
        effects = own_effects(part, "d_entropy")
        zero = part[part["arm"] == "zero"]
        levels = {c: zero[c].mean() if c in zero else float("nan")
                  for c in ("entropy_before", "trunk_entropy", "minibatch_entropy")}
        rows.append(effects[effects["arm"].isin(masks)].assign(group=group, **levels))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def draw_insight2_splits(by_split: dict[str, pd.DataFrame], out: Path, formats, dpi) -> list[Path]:
    """One panel a split with effects (split -> its class_effects_by)."""
    panels = [(s, e) for s, e in by_split.items() if not e.empty]
    fig, axes = plt.subplots(len(panels), 1, figsize=(8.0, 3.9 * len(panels)), sharey=True,
                             squeeze=False)
    for ax, (split, effects) in zip(axes[:, 0], panels, strict=True):
        _panel(ax, effects)
        ax.set_title(f"by {SPLITS[split][1] if split == 'entropy' else 'training phase'}: "
                     f"thirds of the {'states' if split == 'entropy' else 'rollouts branched'}",
                     fontsize=10)
    trunks = int(max(e["trunks"].max() for _, e in panels))
    fig.suptitle("Insight 2 within parts of the study (exploratory: no split was planned)\n"
                 f"mean and 95% cluster-bootstrap interval, {trunks} trunk"
                 f"{'s' if trunks != 1 else ''}{' (a pilot)' if trunks < 3 else ''}", fontsize=11)
    fig.tight_layout()
    return save(fig, out, "fig_microscope_insight2_splits", formats, dpi)


def _panel(ax, effects: pd.DataFrame) -> None:
    names = [c for c in CLASS_SIGNS if f"mask:{c}" in set(effects["arm"])]
    groups = list(dict.fromkeys(effects["group"]))
    for k, (group, color) in enumerate(zip(groups, ("#1f77b4", "#ff7f0e", "#2ca02c"), strict=False)):
        mine = effects[effects["group"] == group].set_index("arm")
        e = mine.reindex([f"mask:{c}" for c in names]).dropna(subset=["mean"])
        x = [names.index(a.split(":", 1)[1]) + (k - 1) * 0.22 for a in e.index]
        first = mine.iloc[0]
        ax.errorbar(x, e["mean"], yerr=[e["mean"] - e["low"], e["high"] - e["mean"]], fmt="o",
                    color=color, capsize=3,
                    label=f"{group} (entropy: probes {first['entropy_before']:.2f}, trunk's "
                          f"responses {first['trunk_entropy']:.2f}, mini-batch "
                          f"{first['minibatch_entropy']:.2f})")
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_xticks(range(len(names)), [f"{CLASS_LABELS[c]}\npaper: "
                                      f"{'rises' if CLASS_SIGNS[c] > 0 else 'falls'}" for c in names])
    ax.set_ylabel("entropy change,\nclass mask - zero step")
    ax.legend(fontsize=7)
