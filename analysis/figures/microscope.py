"""The microscope's figures: each rule's own effect on the entropy, Insight 2's table
measured, log p(correct) against the positive share, and the short-horizon accuracy.

Every interval is the two-stage cluster bootstrap's (trunks, then rollouts within them):
analysis/core/cluster_bootstrap.py.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from analysis.claims.microscope import KEYS
from analysis.core.cluster_bootstrap import cluster_bootstrap
from analysis.core.style import save

CLASS_SIGNS = {"high_pos": -1, "low_neg": -1, "low_pos": 1, "high_neg": 1}  # Insight 2's table
CLASS_LABELS = {"high_pos": "p high, A > 0", "low_neg": "p low, A < 0", "low_pos": "p low, A > 0",
                "high_neg": "p high, A < 0"}


def own_effects(branches: pd.DataFrame, metric: str, ref: str = "zero") -> pd.DataFrame:
    """Per arm: the mean of (arm - ref) on `metric` over the states both have, with its
    bootstrap interval; `ref` zero reads each rule's own effect (the optimizer's drift out)."""
    keys = KEYS["branches"]
    wide = branches.pivot_table(index=keys, columns="arm", values=metric, aggfunc="first")
    columns = ["arm", "mean", "low", "high", "states", "trunks"]
    if ref not in wide:
        return pd.DataFrame(columns=columns)
    rows = []
    for arm in wide.columns:
        if arm == ref:
            continue
        d = (wide[arm] - wide[ref]).rename("value").dropna().reset_index()
        b = cluster_bootstrap(d, "value")
        rows.append({"arm": arm, "mean": b.mean, "low": b.low, "high": b.high, "states": b.n,
                     "trunks": b.clusters})
    # the columns named, so that no rule beside the reference gives an empty table, not no table
    return pd.DataFrame(rows, columns=columns).sort_values("mean", ignore_index=True)


def _interval_plot(ax, effects: pd.DataFrame, label: str) -> None:
    y = range(len(effects))
    ax.errorbar(effects["mean"], list(y),
                xerr=[effects["mean"] - effects["low"], effects["high"] - effects["mean"]],
                fmt="o", color="#1f77b4", ecolor="#555555", capsize=3)
    ax.axvline(0.0, color="black", lw=0.8)
    ax.set_yticks(list(y), [f"{a} ({n} states, {k} trunk{'s' if k != 1 else ''})"
                            for a, n, k in zip(effects["arm"], effects["states"], effects["trunks"],
                                               strict=True)])
    ax.set_xlabel(label)


def draw_entropy_by_arm(branches: pd.DataFrame, out: Path, formats, dpi) -> list[Path]:
    effects = own_effects(branches, "d_entropy")
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(effects) + 1.8))
    _interval_plot(ax, effects, "entropy change of one update minus the zero-gradient step's "
                   "(nats per probe token)")
    ax.set_title("Each rule's own effect on the entropy, same state and mini-batch\n"
                 "mean over states, 95% cluster-bootstrap interval (trunks, then rollouts)")
    fig.tight_layout()
    return save(fig, out, "fig_microscope_entropy_by_arm", formats, dpi)


def draw_insight2(branches: pd.DataFrame, out: Path, formats, dpi) -> list[Path]:
    effects = own_effects(branches, "d_entropy").set_index("arm")
    names = [c for c in CLASS_SIGNS if f"mask:{c}" in effects.index]
    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    for i, c in enumerate(names):
        e = effects.loc[f"mask:{c}"]
        ax.errorbar([i], [e["mean"]], yerr=[[e["mean"] - e["low"]], [e["high"] - e["mean"]]],
                    fmt="o", color="#1f77b4", capsize=4)
        rises = CLASS_SIGNS[c] > 0  # the label on the side the paper predicts, off the zero line
        ax.annotate("paper: " + ("rises" if rises else "falls"), (i, e["high" if rises else "low"]),
                    textcoords="offset points", xytext=(0, 6 if rises else -6), ha="center",
                    va="bottom" if rises else "top", fontsize=8)
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_xticks(range(len(names)), [f"{CLASS_LABELS[c]}\n{_size(effects.loc[f'mask:{c}'])}"
                                      for c in names])
    ax.margins(y=0.25)  # room for the labels above the intervals
    ax.set_ylabel("entropy change, class mask - zero step")
    ax.set_title("Insight 2 measured: one update on one token class\n"
                 "p below/above the mini-batch median, by the sign of A")
    fig.tight_layout()
    return save(fig, out, "fig_microscope_insight2", formats, dpi)


def _size(effect: pd.Series) -> str:
    """How many states and trunks an interval stands on; under 3 trunks it is a pilot."""
    pilot = " (a pilot)" if effect["trunks"] < 3 else ""
    return f"{int(effect['states'])} states\n{int(effect['trunks'])} trunks{pilot}"


def draw_logp_vs_share(branches: pd.DataFrame, out: Path, formats, dpi) -> list[Path]:
    """Every method arm (not the fixed bounds, masks or the zero step) against the zero step."""
    keys = KEYS["branches"]
    arms = sorted(branches.loc[branches["arm_kind"] == "method", "arm"].unique())
    zero = branches[branches["arm"] == "zero"].set_index(keys)["d_logp_correct"]
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for arm in arms:
        mine = branches[branches["arm"] == arm].set_index(keys)
        if mine.empty or zero.empty:
            continue
        own = (mine["d_logp_correct"] - zero.reindex(mine.index)).dropna()
        ax.scatter(mine.loc[own.index, "positive_share"], own, s=8, alpha=0.5, label=arm)
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_xlabel("positive share of the gradient mass on the mini-batch")
    ax.set_ylabel("change in log p(correct) minus the zero step's")
    ax.set_title("Progress against balance, one point per state and rule")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save(fig, out, "fig_microscope_logp_vs_share", formats, dpi)


def draw_horizon_accuracy(horizons: pd.DataFrame, out: Path, formats, dpi) -> list[Path]:
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    arms = list(horizons["arm"].unique())
    for _, state in horizons.groupby(["seed", "rollout"]):
        s = state.set_index("arm").reindex(arms)["sampled_accuracy"]
        ax.plot(range(len(arms)), s.to_numpy(), color="#999999", lw=0.8, alpha=0.7)
    means = horizons.groupby("arm")["sampled_accuracy"].mean().reindex(arms)
    ax.plot(range(len(arms)), means.to_numpy(), "o-", color="#d62728", lw=2, label="mean")
    ax.set_xticks(range(len(arms)), arms)
    problems = "/".join(map(str, sorted(set(horizons["eval_problems"]))))
    starts = horizons.groupby(["seed", "rollout"]).ngroups
    trunks = horizons["seed"].nunique()
    ax.set_ylabel(f"sampled accuracy, {problems} held-out problems")
    ax.set_title("Short-horizon branches from the same states\n(grey: one start state each, "
                 f"{starts} on {trunks} trunk{'s' if trunks != 1 else ''}; red: mean)")
    steps = "/".join(map(str, sorted(set(horizons.loc[horizons["horizon"] > 0, "horizon"]))))
    ax.set_xlabel(f"start: the trunk's state; each arm: trained from it for {steps} rollouts")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save(fig, out, "fig_microscope_horizon_accuracy", formats, dpi)
