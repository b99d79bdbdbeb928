"""The testbed's three criteria, measured on the committed runs (3 seeds per cell).

    python experiments/calibration/criteria.py     # -> experiments/calibration/criteria.md

(a) on-policy ppo gains: the 95% t-interval over seeds of its held-out sampled-accuracy
    gain (final accuracy, the mean of the last 3 evals as the reports take it, minus step 0)
    lies above 0;
(b) a stale ppo cell clips >= 2% of its loss tokens (mean over its stale updates) and its
    final sampled accuracy or its entropy drift differs from on-policy ppo's beyond the seed
    intervals (the two 95% intervals do not overlap);
(c) in some stale cell, bapo's search "moves and reaches" rho0 in >= 20% of its stale
    updates.

Each root is judged on its own: the committed reproduction (experiments/results), the lag
sweeps at lags 4-67 (experiments/lag_results) and those at 64-259 (lag_results_large) were
made from three builds of one warm-start config (on three machines), and the guess-and-check runs
(lag_results_guess) from another task's warm start, so cells of two roots are never
compared. Stale updates: updates 1..k-1 of a fresh
rollout, every update after a delay queue's warm-up. Definitions (final accuracy, entropy
drift = last 5 steps minus first 5, search outcomes) are the reports' own (analysis/).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from analysis.claims.paper import BASELINE, PROPOSED  # noqa: E402
from analysis.core.lags import lag_summary, steady_updates  # noqa: E402
from analysis.core.loader import RunSet, load_runs  # noqa: E402
from analysis.core.search_outcomes import outcome, searches_bounds  # noqa: E402
from analysis.core.stats import fmt_ci, mean_ci  # noqa: E402

CLIP_TARGET, MOVED_TARGET = 0.02, 0.20
ROOTS = {
    "reproduction": REPO / "experiments" / "results",
    "lag sweeps": REPO / "experiments" / "lag_results",
    "lag sweeps, lags 64-259": REPO / "experiments" / "lag_results_large",
    "guess-and-check": REPO / "experiments" / "lag_results_guess",
}
HEADER = ["| root | criterion | measured (mean ± 95% half-width over seeds) | target | verdict |",
          "|---|---|---|---|---|"]


def apart(a: tuple, b: tuple) -> bool:
    """The two 95% intervals (mean, low, high, n) do not overlap (both need >= 2 seeds)."""
    (_, alo, ahi, an), (_, blo, bhi, bn) = a, b
    return an >= 2 and bn >= 2 and (ahi < blo or bhi < alo)


def stale_updates(runs: RunSet) -> pd.DataFrame:
    u = steady_updates(runs)
    if u.empty:
        return u
    return u[(u["update"] >= 1) | (u["source"] == "delay")]


def with_gain(runs: RunSet, s: pd.DataFrame) -> pd.DataFrame:
    first = runs.evals.sort_values("step").groupby("run_id", observed=True).head(1)
    acc0 = first.set_index("run_id")["sampled_accuracy"]
    return s.assign(acc0=s["run_id"].map(acc0), gain=s["final_sampled_acc"] - s["run_id"].map(acc0))


def on_policy(s: pd.DataFrame) -> pd.DataFrame:
    return s[(s["method"] == BASELINE) & (s["lag_high"] == 0) & (s["anchor"] == "coupled")]


def criterion_a(root: str, s: pd.DataFrame) -> list[str]:
    base = on_policy(s)
    if base.empty:
        return [f"| {root} | (a) | no on-policy ppo runs | — | — |"]
    gain = mean_ci(base["gain"])
    ok = gain[3] >= 2 and gain[1] > 0
    return [f"| {root} | (a) on-policy gain | ppo at lag 0: {fmt_ci(*gain)} (sampled, from "
            f"{base['acc0'].mean():.3f} to {base['final_sampled_acc'].mean():.3f}) | interval "
            f"above 0 | {'met' if ok else 'not met'} |"]


def criterion_b(root: str, s: pd.DataFrame, stale_clip: pd.Series) -> list[str]:
    base = on_policy(s)
    stale = s[(s["method"] == BASELINE) & (s["lag_high"] > 0) & (s["anchor"] == "coupled")]
    lines = []
    for (_, lag), cell in stale.groupby(["lag_low", "lag"], sort=True):  # by lag_low
        if base.empty:
            break
        acc0, acck = mean_ci(base["final_sampled_acc"]), mean_ci(cell["final_sampled_acc"])
        h0, hk = mean_ci(base["entropy_drift"]), mean_ci(cell["entropy_drift"])
        clip = mean_ci(cell["run_id"].map(stale_clip))
        ok = clip[0] >= CLIP_TARGET and (apart(acc0, acck) or apart(h0, hk))
        lines.append(
            f"| {root} | (b) ppo at lag {lag} vs lag 0 | final sampled acc. {fmt_ci(*acck)} vs "
            f"{fmt_ci(*acc0)}; entropy drift {fmt_ci(*hk, digits=4)} vs {fmt_ci(*h0, digits=4)}; "
            f"clip fraction (stale updates) {fmt_ci(*clip, digits=4)} | clip >= "
            f"{CLIP_TARGET:.0%} and intervals apart in either | {'met' if ok else 'not met'} |")
    return lines or [f"| {root} | (b) | no stale ppo cell beside on-policy ppo | — | — |"]


def criterion_c(root: str, runs: RunSet, u: pd.DataFrame) -> list[str]:
    proposed = [r for r in runs.select(searches_bounds) if r.method == PROPOSED]
    if not proposed:
        return [f"| {root} | (c) | no stale {PROPOSED} runs | — | — |"]
    traits = proposed[0].traits
    u = u[u["run_id"].isin({r.run_id for r in proposed})] if not u.empty else u
    lines = []
    for lag, g in (u.groupby("lag", sort=False) if not u.empty else []):
        shares = outcome(g, traits).value_counts(normalize=True)
        moved = float(shares.get("moved, reached", 0.0))
        rest = ", ".join(f"{o} {float(shares.get(o, 0.0)):.1%}"
                         for o in ("at start", "not reached", "undefined"))
        lines.append(f"| {root} | (c) bapo at lag {lag} | moved, reached {moved:.1%} of {len(g)} "
                     f"stale updates ({rest}) | >= {MOVED_TARGET:.0%} | "
                     f"{'met' if moved >= MOVED_TARGET else 'not met'} |")
    return lines or [f"| {root} | (c) | no stale bapo runs | — | — |"]


def criteria(root: str, path: Path) -> list[str]:
    runs = load_runs([path])
    # Learning criteria: runs under random rewards (the entropy control) cannot gain.
    runs = runs.subset(lambda r: r.status == "finished"
                       and r.cfg("task.reward", "verifier") == "verifier")
    if not runs.runs:
        return [f"| {root} | — | no finished runs under {path.relative_to(REPO)} | — | — |"]
    s = with_gain(runs, lag_summary(runs))
    u = stale_updates(runs)
    stale_clip = (u.assign(c=pd.to_numeric(u["clip_frac"], errors="coerce"))
                  .groupby("run_id", observed=True)["c"].mean()) if not u.empty else pd.Series()
    return [*criterion_a(root, s), *criterion_b(root, s, stale_clip), *criterion_c(root, runs, u)]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=HERE / "criteria.md")
    args = p.parse_args(argv)
    lines = list(HEADER)
    for root, path in ROOTS.items():
        lines += criteria(root, path) if path.exists() else [
            f"| {root} | — | {path.relative_to(REPO)} not there yet | — | — |"]
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
