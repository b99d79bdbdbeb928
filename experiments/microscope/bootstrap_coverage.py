"""How often the microscope's two-stage cluster bootstrap covers the true mean, by simulation,
at the study's design (3-4 trunks x 25 rollouts x 3 stale updates) and a range of trunk-level
correlation. A 95% interval that covers less than 95% calls too much `held`.

Each simulated study draws, for a paired difference of true mean 0, a trunk effect
(variance icc_trunk), a rollout effect (icc_rollout) and a state's own noise (the rest; total
variance 1), and is judged by
- the bootstrap of analysis/core/cluster_bootstrap.py (trunks, then rollouts within each;
  here vectorized, which is the same estimator when every rollout holds the same number of
  states, as in the study; `--check` compares the two on one study), and
- a t-interval over the trunk means (G - 1 degrees of freedom), the textbook answer for few
  clusters.
It prints, per setting, each interval's coverage and the share of studies in which every
trunk's mean has the same sign (the `trunks agreeing` column at G of G).

    python experiments/microscope/bootstrap_coverage.py            # the table (a few minutes)
    python experiments/microscope/bootstrap_coverage.py --check    # vectorized = the module
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from analysis.core.stats import t975  # noqa: E402

ROLLOUTS, UPDATES = 25, 3  # the study's: rollouts 0-24, stale updates 1-3


def simulate(rng, trunks: int, icc_trunk: float, icc_rollout: float, tails: str) -> np.ndarray:
    """One study's paired differences, shape (trunks, rollouts, updates), true mean 0."""
    noise = (rng.standard_t(3, (trunks, ROLLOUTS, UPDATES)) / np.sqrt(3) if tails == "t3"
             else rng.normal(size=(trunks, ROLLOUTS, UPDATES)))
    return (np.sqrt(icc_trunk) * rng.normal(size=(trunks, 1, 1))
            + np.sqrt(icc_rollout) * rng.normal(size=(trunks, ROLLOUTS, 1))
            + np.sqrt(1 - icc_trunk - icc_rollout) * noise)


def bootstrap_interval(rng, study: np.ndarray, reps: int, alpha: float = 0.05) -> tuple[float, float]:
    """The two-stage percentile interval: trunks with replacement, then rollouts within."""
    rollout_means = study.mean(axis=2)  # equal updates per rollout: the row mean is theirs
    g, r = rollout_means.shape
    trunks = rng.integers(0, g, size=(reps, g, 1))
    rollouts = rng.integers(0, r, size=(reps, g, r))
    means = rollout_means[trunks, rollouts].mean(axis=(1, 2))
    return tuple(np.quantile(means, [alpha / 2, 1 - alpha / 2]))


def t_interval(study: np.ndarray) -> tuple[float, float]:
    trunk_means = study.mean(axis=(1, 2))
    g = len(trunk_means)
    half = t975(g - 1) * trunk_means.std(ddof=1) / np.sqrt(g)
    return trunk_means.mean() - half, trunk_means.mean() + half


def coverage(trunks: int, icc_trunk: float, icc_rollout: float, tails: str, studies: int,
             reps: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    boot = t = same_sign = 0
    for _ in range(studies):
        study = simulate(rng, trunks, icc_trunk, icc_rollout, tails)
        lo, hi = bootstrap_interval(rng, study, reps)
        boot += lo <= 0 <= hi
        lo, hi = t_interval(study)
        t += lo <= 0 <= hi
        signs = np.sign(study.mean(axis=(1, 2)))
        same_sign += abs(signs.sum()) == trunks
    return {"bootstrap": boot / studies, "t over trunks": t / studies,
            "all trunks one sign": same_sign / studies}


def check(reps: int = 4000) -> None:
    """The vectorized interval against analysis/core/cluster_bootstrap.py on one study."""
    import pandas as pd

    from analysis.core.cluster_bootstrap import cluster_bootstrap

    study = simulate(np.random.default_rng(1), 4, 0.05, 0.15, "normal")
    g, r, u = study.shape
    rows = pd.DataFrame({"seed": np.repeat(np.arange(g), r * u),
                         "rollout": np.tile(np.repeat(np.arange(r), u), g),
                         "value": study.ravel()})
    module = cluster_bootstrap(rows, "value", reps=reps)
    mine = bootstrap_interval(np.random.default_rng(2), study, reps)
    print(f"module ({module.low:+.4f}, {module.high:+.4f}); vectorized ({mine[0]:+.4f}, "
          f"{mine[1]:+.4f}); the two differ by resampling noise only")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--studies", type=int, default=2000, help="simulated studies a setting")
    p.add_argument("--reps", type=int, default=2000, help="bootstrap replicates a study")
    p.add_argument("--check", action="store_true", help="compare with the module and stop")
    args = p.parse_args(argv)
    if args.check:
        check()
        return 0
    print(f"{ROLLOUTS} rollouts x {UPDATES} updates a trunk; {args.studies} studies a row, "
          f"true mean 0; nominal coverage 0.95\n")
    print("| trunks | icc trunk | icc rollout | noise | bootstrap covers | t over trunks covers "
          "| all trunks one sign |")
    print("|---|---|---|---|---|---|---|")
    for tails in ("normal", "t3"):
        for trunks in (3, 4):
            for icc in (0.0, 0.01, 0.03, 0.1, 0.3):
                if tails == "t3" and icc not in (0.0, 0.1):
                    continue
                c = coverage(trunks, icc, 0.15, tails, args.studies, args.reps,
                             seed=int(icc * 1000) + 10 * trunks)
                print(f"| {trunks} | {icc:g} | 0.15 | {tails} | {c['bootstrap']:.3f} | "
                      f"{c['t over trunks']:.3f} | {c['all trunks one sign']:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
