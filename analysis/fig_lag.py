"""Figures of the lag sweeps (analysis/lag_report.py draws them).

- lag_training: ppo's reward, entropy, clip fraction and grad norm against step, one colour
  per lag (the paper's Fig. 2, by lag instead of staleness);
- lag_ratios: the share of loss tokens in each IS-ratio bin, by lag and advantage sign, with
  the clip range [0.8, 1.2] shaded;
- lag_bapo: BAPO's search outcome per lag, its positive share before the search against
  rho0, and the bounds it moved to;
- lag_forest: paired differences against ppo, by seed, at each lag.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis import style
from analysis.cells import split_variant
from analysis.plotting import FigureResult, Options, require, save
from analysis.search_outcomes import outcome
from analysis.stats import mean_ci
from src.run_vocab import RATIO_BIN_EDGES, MethodTraits

TRAINING_METRICS = {
    "reward_mean": "training reward",
    "entropy_mean": "entropy (nats/token)",
    "clip_frac": "clip fraction (loss tokens)",
    "grad_norm": "grad norm (before clipping at 1.0)",
}
OUTCOME_COLOURS = {"at start": "#9e9e9e", "moved, reached": "#2e7d32",
                   "not reached": "#c62828", "undefined": "#000000"}
BIN_LABELS = ["≤0.2", *[f"{a:g}-{b:g}" for a, b in zip(RATIO_BIN_EDGES, RATIO_BIN_EDGES[1:], strict=False)],
              f">{RATIO_BIN_EDGES[-1]:g}"]
FOREST_METRICS = {
    "final_greedy_acc": "final greedy accuracy",
    "final_sampled_acc": "final sampled accuracy",
    "entropy_drift": "entropy drift (last 5 - first 5 steps)",
}


def lag_order(labels: pd.Series, low: pd.Series) -> list[str]:
    """Lag labels by their low end; on a tie the narrower first (on-policy "0" before the
    paper's "0-3")."""
    d = pd.DataFrame({"l": labels, "o": low}).drop_duplicates("l")
    return list(d.assign(w=d["l"].str.len()).sort_values(["o", "w"])["l"])


def _lag_palette(order: list[str]) -> dict[str, tuple]:
    cmap = plt.get_cmap("viridis")
    return {lag: cmap(i / max(len(order) - 1, 1) * 0.9) for i, lag in enumerate(order)}


SMOOTH_STEPS = 5  # per-step values of one seed swing by half their range; a rolling mean shows the trend


def fig_lag_training(steps: pd.DataFrame, lags: pd.DataFrame, opts: Options,
                     note: str = "") -> FigureResult:
    """`steps`: step records of ppo runs; `lags`: lag_table rows of those runs."""
    d = steps.merge(lags[["run_id", "lag", "lag_low"]], on="run_id")
    d = d.sort_values(["run_id", "step"])
    for metric in TRAINING_METRICS:
        d[metric] = pd.to_numeric(d[metric], errors="coerce").groupby(d["run_id"]).transform(
            lambda s: s.rolling(SMOOTH_STEPS, min_periods=1).mean())
    require(not d.empty, "no ppo runs with a lag")
    order = lag_order(d["lag"], d["lag_low"])
    colours = _lag_palette(order)
    fig, axes = plt.subplots(1, len(TRAINING_METRICS), figsize=(4.2 * len(TRAINING_METRICS), 3.6))
    rows = []
    for ax, (metric, label) in zip(axes, TRAINING_METRICS.items(), strict=True):
        for lag in order:
            one = d[d["lag"] == lag]
            v = one.assign(v=pd.to_numeric(one[metric], errors="coerce")).groupby("step")["v"]
            mean, n = v.mean(), v.count()
            ax.plot(mean.index, mean.values, color=colours[lag],
                    label=f"lag {lag} (n={int(one['run_id'].nunique())})")
            rows += [{"metric": metric, "lag": lag, "step": s, "mean": m, "n": int(n[s])}
                     for s, m in mean.items()]
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("step")
        if metric == "grad_norm":  # rare spikes of 10-50 would flatten the rest
            ax.set_yscale("log")
    axes[0].legend(fontsize=8, title="ppo, lag in updates", title_fontsize=8)
    fig.suptitle(f"ppo by lag: rolling mean over {SMOOTH_STEPS} steps, then mean over seeds "
                 "(n = runs)" + (f"\n{note}" if note else ""),
                 fontsize=10)
    fig.tight_layout()
    return FigureResult("lag_training", save(fig, "lag_training", opts), pd.DataFrame(rows))


def ratio_shares(updates: pd.DataFrame) -> pd.DataFrame:
    """Per lag and sign: the share of loss tokens in each ratio bin (summed histograms)."""
    rows = []
    if "lag" not in updates:  # no runs of the kind asked for (an empty frame has no columns)
        return pd.DataFrame(rows)
    for lag, g in updates.groupby("lag", observed=True, sort=False):
        for sign, col in (("A > 0", "ratio_hist_pos"), ("A < 0", "ratio_hist_neg")):
            if col not in g:  # runs from before the drift telemetry have no histograms
                continue
            hists = [h for h in g[col] if isinstance(h, list | np.ndarray) and len(h)]
            if not hists:
                continue
            total = np.sum(np.asarray(hists, dtype=float), axis=0)
            share = total / total.sum() if total.sum() else total
            rows += [{"lag": lag, "lag_low": g["lag_low"].iloc[0], "sign": sign, "bin": b,
                      "share": float(s), "tokens": int(t)}
                     for b, s, t in zip(BIN_LABELS, share, total, strict=True)]
    return pd.DataFrame(rows)


def outside_clip(shares: pd.DataFrame) -> pd.Series:
    """Per (lag, sign): the share of tokens with r <= 0.8 or r > 1.2 (bins off [0.8, 1.2])."""
    inside = {"0.8-1", "1-1.2"}
    return shares[~shares["bin"].isin(inside)].groupby(["lag", "sign"], sort=False)["share"].sum()


def fig_lag_ratios(updates: pd.DataFrame, opts: Options, note: str = "") -> FigureResult:
    d = ratio_shares(updates)
    require(not d.empty, "no ratio histograms in the update records")
    order = lag_order(d["lag"], d["lag_low"])
    colours = _lag_palette(order)
    off = outside_clip(d)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    width = 0.8 / len(order)
    x = np.arange(len(BIN_LABELS))
    for ax, sign in zip(axes, ("A > 0", "A < 0"), strict=True):
        ax.axvspan(2.5, 4.5, color="#e0e0e0", zorder=0)  # bins 0.8-1 and 1-1.2
        for i, lag in enumerate(order):
            one = d[(d["lag"] == lag) & (d["sign"] == sign)].set_index("bin").reindex(BIN_LABELS)
            ax.bar(x + (i - (len(order) - 1) / 2) * width, one["share"], width,
                   color=colours[lag],
                   label=f"lag {lag}: {off.get((lag, sign), np.nan):.1%} outside")
        ax.set_yscale("log")
        ax.set_xticks(x, BIN_LABELS, fontsize=8)
        ax.set_xlabel("IS ratio r = pi / pi_old (bins)")
        ax.set_title(f"{sign}: share of loss tokens per bin (shaded: inside [0.8, 1.2])",
                     fontsize=9)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("share of tokens (log scale)")
    fig.suptitle("IS ratios by lag and advantage sign (steady updates of ppo)"
                 + (f"\n{note}" if note else ""), fontsize=10)
    fig.tight_layout()
    return FigureResult("lag_ratios", save(fig, "lag_ratios", opts), d)


def search_by_lag(updates: pd.DataFrame, traits: dict[str, MethodTraits]) -> pd.DataFrame:
    """Per (method, lag): the share of each search outcome, the share of updates whose
    positive share before the search was below the method's target, and the mean bounds of
    the updates where the search moved and reached its target (an update that cannot reach
    it ends at the grid maximum by construction). `traits`: run_id -> the method's traits,
    which name the search's record keys."""
    rows = []
    u = updates.assign(outcome=pd.concat([outcome(g, traits[rid]) for rid, g in
                                          updates.groupby("run_id", observed=True)]))
    for (method, lag), g in u.groupby(["method", "lag"], observed=True, sort=False):
        shares = g["outcome"].value_counts(normalize=True)
        moved = g[g["outcome"] == "moved, reached"]
        rho0 = pd.to_numeric(g.get("rho0"), errors="coerce")
        rows.append({
            "method": method, "lag": lag, "lag_low": g["lag_low"].iloc[0], "updates": len(g),
            **{o: float(shares.get(o, 0.0)) for o in OUTCOME_COLOURS},
            "rho_before_mean": float(pd.to_numeric(g["rho_before"], errors="coerce").mean()),
            "below_target": float((pd.to_numeric(g["rho_before"], errors="coerce")
                                   < rho0).mean()) if rho0.notna().any() else np.nan,
            "moved_c_low": float(pd.to_numeric(moved["c_low"], errors="coerce").mean()),
            "moved_c_high": float(pd.to_numeric(moved["c_high"], errors="coerce").mean()),
            "moved_n": len(moved),
        })
    return pd.DataFrame(rows)


def _tick(method: str, lag: str) -> str:
    """A cell's label for a narrow column: a variant's changed parameters on a line of their
    own, without the method's prefix (`bapo (bapo.low_start=0.8)` -> `bapo` / `low_start=0.8`),
    and a measured lag's source below it (`lag ~13` / `(replay)`)."""
    name, changed = split_variant(method)
    method = name if not changed else f"{name}\n{changed.replace(f'{name}.', '')}"
    return f"{method}\nlag {lag.replace(' (', chr(10) + '(')}"


def fig_lag_bapo(updates: pd.DataFrame, traits: dict[str, MethodTraits], opts: Options,
                 note: str = "") -> FigureResult:
    """`updates`: steady update records of the runs whose method searches its bounds, with
    `lag`, `lag_low`, `method` and `rho0` (the method's target share) columns."""
    require(not updates.empty, "no bapo runs with a lag")
    table = search_by_lag(updates, traits)
    order = lag_order(table["lag"], table["lag_low"])
    methods = style.method_order(table["method"].unique())
    cells = [(m, lag) for lag in order for m in methods
             if ((table["method"] == m) & (table["lag"] == lag)).any()]
    # each panel has a column per cell: ~0.9 in a column keeps three-line labels apart
    fig, axes = plt.subplots(1, 3, figsize=(3 * max(5.0, 0.9 * len(cells)), 4.6))
    ax = axes[0]
    bottom = np.zeros(len(cells))
    t = table.set_index(["method", "lag"])
    for o, colour in OUTCOME_COLOURS.items():
        vals = np.array([t.loc[c, o] for c in cells])
        ax.bar(range(len(cells)), vals, bottom=bottom, color=colour, label=o)
        bottom += vals
    ax.set_xticks(range(len(cells)), [f"{_tick(m, lag)}\n({t.loc[(m, lag), 'updates']} updates)"
                                      for m, lag in cells], fontsize=7)
    ax.set_ylabel("share of updates")
    ax.set_title("search outcome (n updates)", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax = axes[1]
    data = [pd.to_numeric(updates.loc[(updates["method"] == m) & (updates["lag"] == lag),
                                      "rho_before"], errors="coerce").dropna() for m, lag in cells]
    ax.boxplot(data, showfliers=False)
    for i, (m, lag) in enumerate(cells):
        target = pd.to_numeric(updates.loc[(updates["method"] == m) & (updates["lag"] == lag),
                                           "rho0"], errors="coerce").dropna()
        if len(target):
            ax.hlines(target.iloc[0], i + 0.6, i + 1.4, color="#c62828", lw=2)
    ax.set_xticks(range(1, len(cells) + 1), [_tick(m, lag) for m, lag in cells],
                  fontsize=7)
    ax.set_ylabel("positive share of the gradient at the start bounds")
    ax.set_title("rho before the search (red: the method's target rho0)", fontsize=9)
    ax = axes[2]
    for i, (m, lag) in enumerate(cells):
        row = t.loc[(m, lag)]
        if row["moved_n"]:
            ax.plot([i, i], [row["moved_c_low"], row["moved_c_high"]], color="#2e7d32", lw=4)
        ax.text(i, 0.62, f"n={int(row['moved_n'])}", ha="center", fontsize=7)
    ax.axhline(0.8, color="#9e9e9e", ls="--", lw=1)
    ax.axhline(1.2, color="#9e9e9e", ls="--", lw=1)
    ax.set_ylim(0.55, None)
    ax.set_xticks(range(len(cells)), [_tick(m, lag) for m, lag in cells], fontsize=7)
    ax.set_ylabel("mean [c_low, c_high]")
    ax.set_title("bounds where the search moved and reached rho0\n(dashed: [0.8, 1.2]; "
                 "n: such updates)", fontsize=9)
    fig.suptitle("BAPO's search by lag (steady updates)" + (f"\n{note}" if note else ""),
                 fontsize=10)
    fig.tight_layout()
    return FigureResult("lag_bapo", save(fig, "lag_bapo", opts), table)


def paired_rows(summary: pd.DataFrame, reference: str = style.BASELINE) -> pd.DataFrame:
    """Per (lag, method != reference, metric): the per-seed differences method - reference
    over the seeds both ran, their mean and 95% t-interval."""
    rows = []
    for lag, g in summary.groupby("lag", sort=False):
        ref = g[g["method"] == reference].set_index("seed")
        for method, m in g[g["method"] != reference].groupby("method"):
            m = m.set_index("seed")
            for metric in FOREST_METRICS:
                common = m.index.intersection(ref.index)
                d = (m.loc[common, metric] - ref.loc[common, metric]).dropna()
                mean, lo, hi, n = mean_ci(d)
                rows.append({"lag": lag, "lag_low": g["lag_low"].iloc[0], "method": method,
                             "metric": metric, "mean": mean, "low": lo, "high": hi, "n": n,
                             "per_seed": [round(float(x), 4) for x in d]})
    return pd.DataFrame(rows)


def fig_lag_forest(summary: pd.DataFrame, opts: Options, note: str = "") -> FigureResult:
    d = paired_rows(summary)
    require(not d.empty and d["n"].max() > 0, "no method shares seeds with ppo at any lag")
    order = lag_order(d["lag"], d["lag_low"])
    methods = style.method_order(d["method"].unique())
    colours = style.method_palette(methods)
    labels = [(lag, m) for lag in order for m in methods
              if ((d["lag"] == lag) & (d["method"] == m)).any()]
    fig, axes = plt.subplots(1, len(FOREST_METRICS), figsize=(4.4 * len(FOREST_METRICS),
                                                              1.2 + 0.38 * len(labels)),
                             sharey=True)
    for ax, (metric, title) in zip(axes, FOREST_METRICS.items(), strict=True):
        for y, (lag, m) in enumerate(labels):
            row = d[(d["lag"] == lag) & (d["method"] == m) & (d["metric"] == metric)].iloc[0]
            if row["n"] >= 2 and np.isfinite(row["low"]):
                ax.plot([row["low"], row["high"]], [y, y], color=colours[m], lw=2)
            ax.plot(row["per_seed"], [y] * len(row["per_seed"]), "o", ms=3, color=colours[m],
                    alpha=0.5)
            ax.plot([row["mean"]], [y], "D", color=colours[m], ms=6)
        ax.axvline(0, color="black", lw=0.8)
        ax.set_title(f"{title}\nmethod - ppo, same seed", fontsize=9)
    axes[0].set_yticks(range(len(labels)), [f"{m} @ lag {lag}" for lag, m in labels], fontsize=8)
    axes[0].invert_yaxis()
    fig.suptitle("Paired differences against ppo (diamond: mean; line: 95% t-interval over "
                 "seeds; dots: seeds)" + (f"\n{note}" if note else ""), fontsize=10)
    fig.tight_layout()
    return FigureResult("lag_forest", save(fig, "lag_forest", opts), d)


ANCHOR_STYLE = {"coupled": ("#c62828", "o"), "recompute": ("#1565c0", "s"),
                "decoupled": ("#2e7d32", "D")}


def corrections_table(summary: pd.DataFrame, metric: str = "final_greedy_acc") -> pd.DataFrame:
    """ppo per (lag, anchor): mean and 95% t-interval of `metric` over seeds (AReaL's
    Table 3 layout: one row per correction, one column per lag)."""
    d = summary[(summary["method"] == style.BASELINE) & (summary["source"] == "delay")]
    rows = []
    for (lag, anchor), g in d.groupby(["lag", "anchor"], sort=False):
        m, lo, hi, n = mean_ci(g[metric])
        rows.append({"lag": lag, "lag_low": g["lag_low"].iloc[0], "anchor": anchor,
                     "mean": m, "low": lo, "high": hi, "n": n})
    return pd.DataFrame(rows)


def fig_lag_corrections(summary: pd.DataFrame, opts: Options, on_policy: float | None = None,
                        note: str = "") -> FigureResult:
    """Final greedy accuracy against the lag, one line per ratio anchor; the on-policy ppo
    mean as a reference line."""
    t = corrections_table(summary)
    require(not t.empty and t["anchor"].nunique() > 1,
            "no ppo runs under more than one anchor (the corrections sweep)")
    order = lag_order(t["lag"], t["lag_low"])
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, anchor in enumerate(a for a in ANCHOR_STYLE if a in set(t["anchor"])):
        colour, marker = ANCHOR_STYLE[anchor]
        one = t[t["anchor"] == anchor].set_index("lag").reindex(order)
        x = np.arange(len(order)) + (i - 1) * 0.08
        ax.plot(x, one["mean"], marker=marker, color=colour,
                label=f"{anchor} (n={int(one['n'].max())})")
        ok = one["low"].notna()
        ax.vlines(x[ok.to_numpy()], one["low"][ok], one["high"][ok], color=colour, lw=1.5)
    if on_policy is not None:
        ax.axhline(on_policy, color="black", ls="--", lw=1, label="on-policy ppo (1x)")
    ax.set_xticks(range(len(order)), [f"lag {lag}" for lag in order])
    ax.set_ylabel("final greedy accuracy (256 held-out problems)")
    ax.set_title("ppo's ratio anchor against the lag (mean, 95% t-interval over seeds)"
                 + (f"\n{note}" if note else ""), fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return FigureResult("lag_corrections", save(fig, "lag_corrections", opts), t)
