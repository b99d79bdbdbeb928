"""Figures of the lag sweeps (analysis/lag_report.py draws them).

- lag_training: ppo's reward, entropy, clip fraction and grad norm against step, one line
  per lag (the paper's Fig. 2, by lag instead of staleness);
- lag_ratios: the share of loss tokens in each IS-ratio bin, by lag and advantage sign, with
  the clip range [0.8, 1.2] shaded;
- lag_bapo: BAPO's search outcome per lag, its positive share before the search against
  rho0, and its reach rate against its ceiling (analysis/core/search_ceiling.py);
- lag_forest: paired differences against ppo, by seed, at each lag;
- lag_corrections: ppo's final accuracy by lag under each ratio anchor.

"Final" accuracy is the mean of a run's last three evals (analysis/core/final.py).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.core import style
from analysis.core.cells import split_variant
from analysis.core.final import FINAL_EVALS
from analysis.core.plotting import FigureResult, Options, require, save
from analysis.core.search_ceiling import reach
from analysis.core.stats import mean_ci, wilson
from src.run_vocab import RATIO_BIN_EDGES

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
    "final_greedy_acc": f"final greedy accuracy (last {FINAL_EVALS} evals)",
    "final_sampled_acc": f"final sampled accuracy (last {FINAL_EVALS} evals)",
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
    """`steps`: step records of ppo runs; `lags`: lag_table rows of those runs (with
    `warmup_steps`). One line per lag; a root with one lag says so in its title."""
    d = steps.merge(lags[["run_id", "lag", "lag_low"]], on="run_id")
    d = d.sort_values(["run_id", "step"])
    for metric in TRAINING_METRICS:
        d[metric] = pd.to_numeric(d[metric], errors="coerce").groupby(d["run_id"]).transform(
            lambda s: s.rolling(SMOOTH_STEPS, min_periods=1).mean())
    require(not d.empty, "no ppo runs with a lag")
    order = lag_order(d["lag"], d["lag_low"])
    colours = _lag_palette(order)
    warmup = lags.groupby("lag")["warmup_steps"].max() if "warmup_steps" in lags else {}
    fig, axes = plt.subplots(1, len(TRAINING_METRICS), figsize=(4.2 * len(TRAINING_METRICS), 3.8))
    rows = []
    for ax, (metric, label) in zip(axes, TRAINING_METRICS.items(), strict=True):
        for lag in order:
            one = d[d["lag"] == lag]
            v = one.assign(v=pd.to_numeric(one[metric], errors="coerce")).groupby("step")["v"]
            mean, n = v.mean(), v.count()
            ax.plot(mean.index, mean.values, color=colours[lag],
                    label=f"lag {lag} (n={int(one['run_id'].nunique())} seeds)")
            k = int(warmup.get(lag, 0)) if len(warmup) else 0
            if k and k in mean.index:  # where the delay queue starts to hold its own rollouts
                ax.plot([k], [mean[k]], marker="|", ms=12, mew=2, color=colours[lag])
            rows += [{"metric": metric, "lag": lag, "step": s, "mean": m, "n": int(n[s])}
                     for s, m in mean.items()]
        ax.set_title(label, fontsize=10)
        ax.set_ylabel(label, fontsize=9)
        ax.set_xlabel("step (rollouts trained on)")
        if metric == "grad_norm":  # rare spikes of 10-50 would flatten the rest
            ax.set_yscale("log")
    axes[0].legend(fontsize=8, title="ppo, lag in optimizer updates", title_fontsize=8)
    what = (f"ppo's training by lag ({len(order)} lags)" if len(order) > 1
            else f"ppo's training at lag {order[0]} (the one lag this root ran ppo at)")
    title = (f"{what}: rolling mean over {SMOOTH_STEPS} steps of each run, then mean over "
             "seeds. |: the end of a delay queue's warm-up (before it, the steps train on the "
             "initial weights' rollouts)" + (f"\n{note}" if note else ""))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return FigureResult("lag_training", save(fig, "lag_training", opts), pd.DataFrame(rows),
                        {"title": pd.DataFrame({"title": [title]})})


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


def fig_lag_ratios(updates: pd.DataFrame, opts: Options, note: str = "",
                   name: str = "lag_ratios", what: str = "steady updates of ppo") -> FigureResult:
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
    fig.suptitle(f"IS ratios by lag and advantage sign ({what})"
                 + (f"\n{note}" if note else ""), fontsize=10)
    fig.tight_layout()
    return FigureResult(name, save(fig, name, opts), d)


def search_by_lag(updates: pd.DataFrame) -> pd.DataFrame:
    """Per (method, lag): the share of each search outcome, the share of updates whose
    positive share before the search was below the method's target, the mean bounds of the
    updates where the search moved and reached its target, and the reach counts against the
    ceiling (search_ceiling.reach). `updates`: annotated by search_ceiling.annotate."""
    rows = []
    for (method, lag), g in updates.groupby(["method", "lag"], observed=True, sort=False):
        shares = g["outcome"].value_counts(normalize=True)
        moved = g[g["outcome"] == "moved, reached"]
        rho0 = pd.to_numeric(g.get("rho0"), errors="coerce")
        r = reach(g)
        rows.append({
            "method": method, "lag": lag, "lag_low": g["lag_low"].iloc[0], "updates": len(g),
            **{o: float(shares.get(o, 0.0)) for o in OUTCOME_COLOURS},
            "rho_before_mean": float(pd.to_numeric(g["rho_before"], errors="coerce").mean()),
            "below_target": float((pd.to_numeric(g["rho_before"], errors="coerce")
                                   < rho0).mean()) if rho0.notna().any() else np.nan,
            "moved_c_low": float(pd.to_numeric(moved["c_low"], errors="coerce").mean()),
            "moved_c_high": float(pd.to_numeric(moved["c_high"], errors="coerce").mean()),
            "moved_n": len(moved),
            "below_n": r.below, "ceiling_n": r.ceiling if r.readable else np.nan,
            "reached_n": r.reached, "ceiling_readable": r.readable,
        })
    return pd.DataFrame(rows)


def _tick(method: str, lag: str) -> str:
    """A cell's label for a narrow column: a variant's changed parameters on a line of their
    own, without the method's prefix (`bapo (bapo.low_start=0.8)` -> `bapo` / `low_start=0.8`),
    and a measured lag's source below it (`lag ~13` / `(replay)`)."""
    name, changed = split_variant(method)
    method = name if not changed else f"{name}\n{changed.replace(f'{name}.', '')}"
    return f"{method}\nlag {lag.replace(' (', chr(10) + '(')}"


def fig_lag_bapo(updates: pd.DataFrame, opts: Options, note: str = "") -> FigureResult:
    """`updates`: steady update records of the runs whose method searches its bounds,
    annotated (search_ceiling.annotate), with `lag`, `lag_low`, `method` and `rho0` (the
    method's target share) columns."""
    require(not updates.empty, "no bapo runs with a lag")
    table = search_by_lag(updates)
    order = lag_order(table["lag"], table["lag_low"])
    methods = style.method_order(table["method"].unique())
    cells = [(m, lag) for lag in order for m in methods
             if ((table["method"] == m) & (table["lag"] == lag)).any()]
    # each panel has a column per cell: ~0.9 in a column keeps three-line labels apart
    fig, axes = plt.subplots(1, 3, figsize=(3 * max(5.0, 1.0 * len(cells)), 5.0))
    t = table.set_index(["method", "lag"])
    _outcome_panel(axes[0], t, cells)
    _rho_before_panel(axes[1], updates, cells)
    _reach_panel(axes[2], t, cells)
    fig.suptitle("BAPO's search by lag (steady updates; every seed's updates pooled)"
                 + (f"\n{note}" if note else ""), fontsize=10)
    fig.tight_layout()
    return FigureResult("lag_bapo", save(fig, "lag_bapo", opts), table)


def _outcome_panel(ax: plt.Axes, t: pd.DataFrame, cells: list[tuple[str, str]]) -> None:
    bottom = np.zeros(len(cells))
    for o, colour in OUTCOME_COLOURS.items():
        vals = np.array([t.loc[c, o] for c in cells])
        ax.bar(range(len(cells)), vals, bottom=bottom, color=colour, label=o)
        bottom += vals
    ax.set_xticks(range(len(cells)), [f"{_tick(m, lag)}\n({t.loc[(m, lag), 'updates']} updates)"
                                      for m, lag in cells], fontsize=7)
    ax.set_ylabel("share of updates")
    ax.set_title("how the search ended (n updates)", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")


def _rho_before_panel(ax: plt.Axes, updates: pd.DataFrame, cells: list[tuple[str, str]]) -> None:
    def of(m: str, lag: str, col: str) -> pd.Series:
        here = updates.loc[(updates["method"] == m) & (updates["lag"] == lag), col]
        return pd.to_numeric(here, errors="coerce").dropna()

    ax.boxplot([of(m, lag, "rho_before") for m, lag in cells], showfliers=False)
    for i, (m, lag) in enumerate(cells):
        target = of(m, lag, "rho0")
        if len(target):
            ax.hlines(target.iloc[0], i + 0.6, i + 1.4, color="#c62828", lw=2)
    ax.set_xticks(range(1, len(cells) + 1), [_tick(m, lag) for m, lag in cells], fontsize=7)
    ax.set_ylabel("positive share of the gradient at the start bounds")
    ax.set_title("rho before the search, per update (box: quartiles, orange: median,\n"
                 "whiskers: 1.5 IQR; red: the method's target rho0)", fontsize=9)


REACH_BARS = {"ceiling_n": ("grid can reach rho0 (ceiling)", "#9e9e9e"),
              "reached_n": ("search reached rho0", "#2e7d32")}


def _reach_panel(ax: plt.Axes, t: pd.DataFrame, cells: list[tuple[str, str]]) -> None:
    """Of the updates that start below rho0: the share some bounds in the grid reach (the
    ceiling) and the share the search reached, Wilson 95% over the pooled updates. Equal
    bars: the search reaches rho0 wherever its grid can."""
    width, top = 0.38, 0.0
    for j, (col, (label, colour)) in enumerate(REACH_BARS.items()):
        for i, cell in enumerate(cells):
            row = t.loc[cell]
            below, k = int(row["below_n"]), row[col]
            if not below or k != k:  # nothing below rho0, or the ceiling is not readable
                continue
            share, low, high = wilson(int(k), below)
            x = i + (j - 0.5) * width
            ax.bar(x, share, width, color=colour, label=label)  # legend de-duplicated below
            ax.vlines(x, low, high, color="black", lw=1)
            top = max(top, high)
    top = min(1.0, max(top, 0.05)) * 1.45
    for i, cell in enumerate(cells):
        row = t.loc[cell]
        ceiling = int(row["ceiling_n"]) if row["ceiling_readable"] else "n/a"
        ax.text(i, top * 0.97, f"below {int(row['below_n'])}\nceiling {ceiling}\n"
                f"reached {int(row['reached_n'])}", ha="center", va="top", fontsize=7)
    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles, strict=True))
    # between the counts (top) and the whiskers (at most 1/1.45 of the axis)
    ax.legend(seen.values(), seen.keys(), fontsize=7, loc="upper center",
              bbox_to_anchor=(0.5, 0.84), ncol=2)
    ax.set_ylim(0, top)
    ax.set_xticks(range(len(cells)), [_tick(m, lag) for m, lag in cells], fontsize=7)
    ax.set_ylabel("share of the updates that start below rho0")
    ax.set_title("reach rate against its ceiling (Wilson 95%, pooled updates); equal bars:\n"
                 "reached wherever the grid can. Counts: updates below rho0 at the start, of\n"
                 "them reachable (n/a: not readable under the value reading) and reached",
                 fontsize=8)


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
        ax.set_xlabel("difference, method − ppo" + (" (share correct)" if "accuracy" in title
                                                    else " (nats/token)"), fontsize=8)
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
                label=f"{anchor} (n={int(one['n'].max())} seeds)")
        ok = one["low"].notna()
        ax.vlines(x[ok.to_numpy()], one["low"][ok], one["high"][ok], color=colour, lw=1.5)
    if on_policy is not None:
        ax.axhline(on_policy, color="black", ls="--", lw=1, label="on-policy ppo (lag 0)")
    ax.set_xticks(range(len(order)), [f"lag {lag}" for lag in order])
    ax.set_ylabel(f"final greedy accuracy (mean of the last {FINAL_EVALS} evals)")
    own = sorted({int(x) for x in summary.get("own_policy_steps", pd.Series(dtype=float))
                  .dropna()})
    ax.set_xlabel(f"lag in optimizer updates\n(each run: {'/'.join(map(str, own)) or 'its'} "
                  "steps on its own rollouts, after a delay's K warm-up steps)", fontsize=8)
    ax.set_title("ppo's ratio anchor against the lag (mean, 95% t-interval over seeds)"
                 + (f"\n{note}" if note else ""), fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return FigureResult("lag_corrections", save(fig, "lag_corrections", opts), t)
