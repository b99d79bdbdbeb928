"""The testbed's three criteria, measured on the reproduction's runs (3 seeds per cell).

    python experiments/calibration/criteria.py [--runs experiments/results]   # -> criteria.md

(a) on-policy ppo gains >= +0.15 held-out sampled accuracy over the run, the 95% interval
    of the gain above 0, on >= 256 eval problems;
(b) at staleness >= 4x, ppo differs from 1x by more than the seed intervals (the two 95%
    intervals do not overlap) in final sampled accuracy or in entropy drop (REPORT.md's: the
    first step's entropy minus the mean of the last 5 steps'), with a clip
    fraction >= 1% (mean over the stale updates 1..k-1);
(c) among bapo's stale updates, "moved, reached" is >= 20%.

Reads run dirs <runs>/<experiment>/<method>/seed<N>/ with the per-run summary of
summarize.py; every verdict is computed from the numbers printed beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
from analysis.search_outcomes import outcome  # noqa: E402
from analysis.stats import fmt_ci, mean_ci  # noqa: E402
from experiments.calibration.summarize import run_summary  # noqa: E402
from src.algorithms import METHODS  # noqa: E402 - bapo's traits name its search records

GAIN_TARGET, CLIP_TARGET, MOVED_TARGET, MIN_EVAL = 0.15, 0.01, 0.20, 256


def seeds(runs: Path, experiment: str, method: str) -> list[Path]:
    """The finished runs of one cell (an unfinished run is not a seed yet)."""
    status = sorted((runs / experiment / method).glob("seed*/status.json"))
    return [p.parent for p in status if json.loads(p.read_text()).get("status") == "finished"]


def entropy_drop(run_dir: Path, last_k: int = 5) -> float:
    """REPORT.md's definition (analysis/summary.py): the first step's entropy minus the mean
    of the last k steps'."""
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    h = pd.DataFrame([r for r in rows if r.get("kind") == "step"]).sort_values("step")["entropy_mean"]
    return float(h.iloc[0] - h.tail(last_k).mean())


def summaries(dirs: list[Path]) -> pd.DataFrame:
    return pd.DataFrame([{**run_summary(d), "H_drop": entropy_drop(d)} for d in dirs])


def ci(values: pd.Series) -> tuple[float, float, float, int]:
    return mean_ci(values)


def apart(a: tuple, b: tuple) -> bool:
    """The two 95% intervals do not overlap (both need >= 2 seeds)."""
    (_, alo, ahi, an), (_, blo, bhi, bn) = a, b
    return an >= 2 and bn >= 2 and (ahi < blo or bhi < alo)


def stale_updates(dirs: list[Path]) -> pd.DataFrame:
    frames = []
    for d in dirs:
        rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if x.strip()]
        u = pd.DataFrame([r for r in rows if r.get("kind") == "update"])
        frames.append(u[u["update"] >= 1])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def criterion_a(runs: Path) -> list[str]:
    s = summaries(seeds(runs, "staleness_1x", "ppo"))
    if s.empty:
        return ["| (a) | no staleness_1x/ppo runs | — | — |"]
    gain = ci(s["gain"])
    ok = gain[0] >= GAIN_TARGET and gain[1] > 0 and s["eval_n"].min() >= MIN_EVAL
    return [f"| (a) on-policy gain | ppo 1x: {fmt_ci(*gain)} (from {s['acc0'].mean():.3f} to "
            f"{s['acc_end'].mean():.3f}; eval {int(s['eval_n'].min())} problems) | "
            f">= {GAIN_TARGET}, interval above 0 | {'met' if ok else 'not met'} |"]


def criterion_b(runs: Path) -> list[str]:
    base = summaries(seeds(runs, "staleness_1x", "ppo"))
    lines = []
    for k in (2, 4, 8):
        s = summaries(seeds(runs, f"staleness_{k}x", "ppo"))
        if s.empty or base.empty:
            continue
        acc1, acck = ci(base["acc_end"]), ci(s["acc_end"])
        drop1, dropk = ci(base["H_drop"]), ci(s["H_drop"])
        clip = ci(s["clip_stale"])
        differs = apart(acc1, acck) or apart(drop1, dropk)
        ok = k >= 4 and differs and clip[0] >= CLIP_TARGET
        verdict = "(2x: not a criterion level)" if k < 4 else ("met" if ok else "not met")
        lines.append(
            f"| (b) ppo {k}x vs 1x | final acc. {fmt_ci(*acck)} vs {fmt_ci(*acc1)}; entropy drop "
            f"{fmt_ci(*dropk, digits=4)} vs {fmt_ci(*drop1, digits=4)}; clip fraction (stale "
            f"updates) {fmt_ci(*clip, digits=4)} | intervals apart in either, clip >= "
            f"{CLIP_TARGET:.0%} | {verdict} |")
    return lines or ["| (b) | no stale ppo runs | — | — |"]


def criterion_c(runs: Path) -> list[str]:
    lines = []
    for k in (2, 4, 8):
        u = stale_updates(seeds(runs, f"staleness_{k}x", "bapo"))
        if u.empty:
            continue
        shares = outcome(u, METHODS["bapo"].traits).value_counts(normalize=True)
        moved = float(shares.get("moved, reached", 0.0))
        rest = ", ".join(f"{o} {float(shares.get(o, 0.0)):.1%}"
                         for o in ("at start", "not reached", "undefined"))
        verdict = "met" if moved >= MOVED_TARGET else "not met"
        lines.append(f"| (c) bapo {k}x | moved, reached {moved:.1%} of {len(u)} stale updates "
                     f"({rest}) | >= {MOVED_TARGET:.0%} | {verdict} |")
    return lines or ["| (c) | no stale bapo runs | — | — |"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=Path, default=HERE.parents[1] / "experiments" / "results")
    p.add_argument("--out", type=Path, default=HERE / "criteria.md")
    args = p.parse_args()
    lines = ["| criterion | measured (mean ± 95% half-width over seeds) | target | verdict |",
             "|---|---|---|---|",
             *criterion_a(args.runs), *criterion_b(args.runs), *criterion_c(args.runs)]
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
