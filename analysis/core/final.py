"""A run's final held-out accuracy: the mean of its last three evals, and where they fall.

One eval is one draw of a noisy number: a run's accuracy on 256 problems moves by up to
0.2 between evals 10 steps apart, enough for the last eval alone to reorder methods. The final accuracy is the mean of the last FINAL_EVALS evals after step 0 (step
0 is the warm start, before any update; a run with fewer evals uses those it has and says
how many).

Comparisons need the same training at those evals. Each eval's position is recorded as
completed steps and as optimizer updates (steps x updates per step, a delay queue's warm-up
steps included), so two cells compared at unequal updates can say so (`alignment_note`).
"""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from analysis.core.loader import RUN_COLS, Run, RunSet
from src.updates import updates_per_rollout

FINAL_EVALS = 3
EVAL_METRICS = {"sampled_accuracy": "sampled accuracy", "greedy_accuracy": "greedy accuracy"}
WINDOW_COLS = ["final_evals", "final_eval_steps", "final_updates", "own_policy_steps"]


def updates_per_step(run: Run) -> int:
    """Optimizer updates per step, as the trainer counts them (src/updates.py): k mini-batch
    updates per pass, `epochs` passes (the full-batch `epochs` mode makes k updates)."""
    return updates_per_rollout(SimpleNamespace(
        staleness=int(run.cfg("train.staleness", 1)),
        staleness_mode=run.cfg("train.staleness_mode", "minibatch"),
        epochs=int(run.cfg("train.epochs", 1) or 1)))


def warmup_steps(run: Run) -> int:
    """Steps that train on rollouts of the initial weights, not of the run's own policy: a
    delay queue of K steps has nothing of its own policy for its first K steps."""
    if str(run.cfg("offpolicy.source", "fresh") or "fresh") != "delay":
        return 0
    return int(run.cfg("offpolicy.delay") or 0)


def _joined(values) -> str:
    return "/".join(str(int(v)) for v in values)


def final_window(runs: RunSet, k: int = FINAL_EVALS) -> pd.DataFrame:
    """One row per run with evals after step 0: each eval metric's mean over the run's last
    `k` of them, how many that is, their steps and optimizer updates ('10/20/30'), and the
    steps the run trained on its own policy's rollouts by its last eval."""
    ev = runs.evals
    cols = [*RUN_COLS, *EVAL_METRICS, *WINDOW_COLS]
    if ev.empty or "step" not in ev:
        return pd.DataFrame(columns=cols)
    by_id = {r.run_id: r for r in runs.runs}
    last = ev[ev["step"] > 0].sort_values(["run_id", "step"]).groupby(
        "run_id", observed=True).tail(k)
    last = last.assign(updates=[int(s) * updates_per_step(by_id[r])
                                for r, s in zip(last["run_id"], last["step"], strict=True)])
    rows = []
    for run_id, g in last.groupby("run_id", observed=True, sort=True):
        run = by_id[run_id]
        rows.append({**{c: getattr(run, c) for c in RUN_COLS},
                     **{m: g[m].mean() for m in EVAL_METRICS if m in g},
                     "final_evals": len(g), "final_eval_steps": _joined(g["step"]),
                     "final_updates": _joined(g["updates"]),
                     "own_policy_steps": int(g["step"].iat[-1]) - warmup_steps(run)})
    out = pd.DataFrame(rows)
    return out[[c for c in cols if c in out.columns]]


def window_text(final: pd.DataFrame) -> str:
    """The evals a set of runs averages, in words: 'steps 10/20/30' when they share them,
    else the distinct windows."""
    steps = sorted(set(final["final_eval_steps"]), key=lambda s: [int(x) for x in s.split("/")])
    return f"steps {steps[0]}" if len(steps) == 1 else "steps " + " or ".join(steps)


def alignment_note(a: pd.DataFrame, b: pd.DataFrame, names: tuple[str, str]) -> str:
    """'' when the two cells' final evals sit at the same optimizer updates; else a note that
    says where each cell's are and how the two are aligned instead (each run's own last
    evals; the steps each trained on its own policy's rollouts). `a`, `b`: run-summary rows
    with the WINDOW_COLS."""
    if not set(WINDOW_COLS) <= set(a.columns) & set(b.columns):
        return ""
    ua, ub = set(a["final_updates"].dropna()), set(b["final_updates"].dropna())
    if not ua or not ub or ua == ub:
        return ""

    def where(name: str, cell: pd.DataFrame) -> str:
        own = "/".join(str(int(x)) for x in sorted(set(cell["own_policy_steps"].dropna())))
        return (f"{name} at updates {', '.join(sorted(set(cell['final_updates'])))} (steps "
                f"{', '.join(sorted(set(cell['final_eval_steps'])))}; {own} steps on its own "
                "policy's rollouts)")

    return (f"not at equal updates, aligned by each run's last {FINAL_EVALS} evals: "
            f"{where(names[0], a)} vs {where(names[1], b)}")
