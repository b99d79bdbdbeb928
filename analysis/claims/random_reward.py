"""The random-reward experiment's claims, as rows, and the table of one such suite.

Under `task.reward=random` the rewards are coin flips, so nothing can be learned and what
moves entropy is the clipping rule and staleness alone (the `random_reward` sweep). A suite
of such runs gets these rows instead of the paper's learning claims (accuracy, contribution
shares), which coin flips cannot test. The rows are hypotheses from the paper's account
(Eq. 6: the clip rule removes low-probability positive tokens' push up, so entropy falls;
Fig. 7: a higher c_high falls less, a lower c_low more), each settled by 95% intervals.
"""

from __future__ import annotations

import pandas as pd

from analysis.claims import verdicts
from analysis.claims.quantities import by_seed
from analysis.claims.rules import Claim
from analysis.claims.schema import (
    ANY,
    DOWN,
    EACH,
    UP,
    Cell,
    Direction,
    NoChange,
    Row,
    ShareAbove,
    Side,
)
from analysis.core import style
from analysis.core.cells import COMPARED, experiment_order, numeric_config
from analysis.core.entropy_law import entropy_drift, law_by_cell, seed_agreement, update_pairs
from analysis.core.grad_clip import grad_clip_share
from analysis.core.loader import Run, RunSet

CONTROL = "ppo"  # the unclipped control at 1x, and what each clipping rule is compared with
MODE_KEY = "train.staleness_mode"
DEFINED = "entropy drift (mean of the last {last_k} steps minus the first {last_k})"


def _drift(method: str, paper: str, direction: int, title: str = "") -> Row:
    side = "below" if direction == DOWN else "above"
    return Row(f"drift_{method}", title or f"Entropy {'falls' if direction == DOWN else 'rises'} "
               f"under random rewards ({method}, {{bounds}}, at {{k}}x, {{where}})", "Eq. 6",
               paper, f"95% interval of the {DEFINED} {side} 0",
               (Side(Cell(method), "drift"),), Direction(direction))


def _vs(method: str, text: str, paper: str, direction: int) -> Row:
    side = "above" if direction == UP else "below"
    return Row(f"vs_{CONTROL}_{method}", f"{text} under random rewards ({method} vs {CONTROL} at "
               "{k}x, {where}; Fig. 7)", "Fig. 7", paper,
               f"paired by seed: drift of {method} minus {CONTROL} {side} 0",
               (Side(Cell(method), "drift", method), Side(Cell(CONTROL), "drift", CONTROL)),
               Direction(direction))


CONTROL_ROW = Row(
    "control", "Entropy does not drift under random rewards without clipping (ppo at 1x, the "
    "control; {mode} mode, {steps} steps)", "Eq. 6", "no drift from clipping: at 1x no bound "
    "binds", f"{DEFINED}: not held when its 95% interval excludes 0",
    (Side(Cell(CONTROL, 1), "drift"),), NoChange())
# Each setting's own drift, in the direction the paper's account gives it (clip_0.8_1.5 has
# none of its own: only against ppo).
OWN = (
    _drift(CONTROL, "falls (low-probability positive tokens are clipped)", DOWN,
           "Symmetric clipping {bounds} lowers entropy under random rewards (ppo at {k}x, {where})"),
    _drift("clip_0.5_1.2", "falls, faster than ppo", DOWN),
    _drift("clip_higher", "falls less than ppo", DOWN),
    _drift("bapo", "falls less than ppo", DOWN),
)
VS_CONTROL = Row(
    "clipping_lowers", "Clipping lowers entropy below the unclipped control under random "
    "rewards (ppo at {k}x vs 1x, {where})", "Eq. 6", "lower at the stale setting",
    "paired by seed: drift at {k}x minus 1x below 0",
    (Side(Cell(CONTROL), "drift", "{k}x"), Side(Cell(CONTROL, 1), "drift", "1x")), Direction(DOWN))
VS_PPO = (
    _vs("clip_0.5_1.2", "Lowering c_low lowers entropy", "lower entropy than ppo (more fall)", DOWN),
    _vs("clip_0.8_1.5", "Raising c_high raises entropy", "higher entropy than ppo (less fall)", UP),
    _vs("clip_higher", "clip_higher keeps entropy higher than ppo", "higher entropy than ppo", UP),
    _vs("bapo", "bapo keeps entropy higher than ppo", "higher entropy than ppo", UP),
)
SIGN = Row(
    "eq6_sign", "The covariance predicts the sign of the per-update entropy change better than "
    "chance ({method} at {k}x, {where}; Eq. 6)", "Eq. 6", "sign(ΔH) = sign(−Cov(log π, A·X))",
    "per seed: share of updates whose signs agree; 95% t-interval over seeds above 0.5",
    (Side(Cell(ANY), "agreement"),), ShareAbove(0.5),
    missing="no entropy_change in its update records (logger.entropy_change=true)")
ROWS: tuple[Row, ...] = (CONTROL_ROW, *OWN, VS_CONTROL, *VS_PPO, SIGN)


def is_random_reward(run: Run) -> bool:
    return run.cfg("task.reward") == "random"


def random_suites(runs: RunSet) -> list[str]:
    """Suites (in report order) whose runs all have coin-flip rewards. task.reward changes
    the numbers, so a suite never mixes the two reward sources."""
    return [s for s in runs.suites if all(is_random_reward(r) for r in runs.select(
        lambda r, s=s: r.suite == s))]


def _values(runs: list[Run], key: str, default=None) -> str:
    return "/".join(str(v) for v in sorted({r.cfg(key, default) for r in runs}))


def mode(runs: list[Run]) -> str:
    return _values(runs, MODE_KEY, "minibatch")


def steps(runs: list[Run]) -> str:
    """The runs' `train.steps` (the sweep runs the same cells at 30 and at 100 steps)."""
    return _values(runs, "train.steps")


def _setting(run: Run) -> str:
    """The run's config apart from what a suite compares and the staleness mode (which
    changes nothing at 1x, where every mode is one update on the whole rollout)."""
    rest = {k: v for k, v in numeric_config(run.config).items()
            if k != MODE_KEY and not any(k == p or k.startswith(f"{p}.") for p in COMPARED)}
    return repr(sorted(rest.items()))


def control_runs(runs: RunSet, suite: str) -> tuple[list[Run], str]:
    """The 1x control of `suite`: its own, or else that of a random-reward suite that
    differs from it only in staleness mode. Returns (runs, note on where they come from)."""
    own = runs.select(lambda r: r.suite == suite)
    here = [r for r in own if r.method == CONTROL and r.staleness == 1]
    if here or not own:
        return here, ""
    key = _setting(own[0])
    there = [r for r in runs.select(is_random_reward)
             if r.method == CONTROL and r.staleness == 1 and _setting(r) == key]
    note = (f"1x control from the {mode(there)}-mode runs: at 1x every staleness mode is the "
            "same update") if there else ""
    return there, note


def cells(runs: list[Run]) -> list[tuple[str, int]]:
    found = {(r.method, r.staleness) for r in runs}
    order = style.method_order({m for m, _ in found})
    return sorted(found, key=lambda c: (c[1], order.index(c[0])))


def experiments(runs: list[Run]) -> str:
    names = experiment_order({(r.experiment, r.staleness) for r in runs})
    return ", ".join(dict.fromkeys(names))  # one name may hold several staleness levels


def bounds(runs: list[Run]) -> str:
    run = runs[0]
    if run.traits.adaptive_bounds:
        return "adaptive bounds"
    lo, hi = run.method_param("c_low"), run.method_param("c_high")
    return f"[{lo:g}, {hi:g}]" if lo is not None and hi is not None else "no clip bounds"


class CoinFlips:
    """One random-reward suite: its runs and its 1x control, with each run's drift and
    gradient-norm clipped share, located by (method, staleness)."""

    def __init__(self, runs: RunSet, suite: str, last_k: int):
        self.runs, self.last_k = runs, last_k
        self.own = runs.select(lambda r: r.suite == suite)
        self.control, self.control_note = control_runs(runs, suite)
        pool = {r.run_id for r in [*self.own, *self.control]}
        both = runs.subset(lambda r: r.run_id in pool)
        drift = entropy_drift(both, last_k).set_index("run_id")["drift"]
        clipped = grad_clip_share(both)
        self.frame = pd.DataFrame(
            [{"run_id": r.run_id, "seed": r.seed, "experiment": r.experiment,
              "drift": drift.get(r.run_id), "grad_clip_share": clipped.get(r.run_id)}
             for r in [*self.own, *self.control]]).drop_duplicates("run_id")
        self.law = law_by_cell(update_pairs(runs.subset(lambda r: r.suite == suite)))
        self.where = f"{mode(self.own)} mode, {steps(self.own)} steps"

    def of(self, cell: Cell, k: int) -> list[Run]:
        level = k if cell.level == EACH else cell.level
        if cell.level == 1 and cell.method == CONTROL:
            return self.control
        return [r for r in self.own if r.method == cell.method and r.staleness == level]

    def judge(self, row: Row, k: int, method: str = "", note: str = "") -> Claim:
        sides = [self.of(s.cell, k) for s in row.sides]
        text = row.claim.format(k=k, where=self.where, method=method, bounds=bounds(sides[0]),
                                mode=mode(sides[0]), steps=steps(sides[0]))
        c = verdicts.claim_of(row, text, experiments=experiments([r for s in sides for r in s]),
                              note=note)
        c.criterion = c.criterion.format(last_k=self.last_k, k=k)
        frames = [self.frame[self.frame["run_id"].isin({r.run_id for r in s})] for s in sides]
        names = tuple(s.name.format(k=k) for s in row.sides)
        m = verdicts.Measured(frames, [by_seed(f, "drift") for f in frames], names,
                              confound="grad_clip_share")
        return verdicts.judge(c, row, m)

    def sign(self, method: str, k: int) -> Claim:
        cell = self.of(Cell(method, k), k)
        c = verdicts.claim_of(SIGN, SIGN.claim.format(method=method, k=k, where=self.where),
                              experiments=experiments(cell))
        law = self.law.set_index(["method", "staleness"])
        if (method, k) not in law.index:
            return verdicts.add_note(c, SIGN.missing)
        shares = seed_agreement(update_pairs(self.runs.subset(
            lambda r, ids={x.run_id for x in cell}: r.run_id in ids)))["share"]
        pooled = law.loc[(method, k)]
        m = verdicts.Measured([], [shares], (), pooled=(int(pooled["agree"]),
                                                        int(pooled["counted"])))
        return verdicts.judge(c, SIGN, m)


def suite_claims(runs: RunSet, suite: str, last_k: int) -> pd.DataFrame:
    """The claim rows of one random-reward suite (columns of analysis/claims/rules.Claim),
    in the order: the control; each cell's own drift; per stale level, ppo against the
    control and each method against ppo; each cell's Eq. 6 sign agreement."""
    t = CoinFlips(runs, suite, last_k)
    found = cells(t.own)
    own = {r.sides[0].cell.method: r for r in OWN}
    vs = {r.sides[0].cell.method: r for r in VS_PPO}
    rows = [t.judge(CONTROL_ROW, 1)] if t.control and not t.control_note else []
    rows += [t.judge(own[m], k) for m, k in found if k > 1 and m in own]
    for k in sorted({k for _, k in found if k > 1}):
        ppo = t.of(Cell(CONTROL), k)
        if t.control and ppo:
            rows.append(t.judge(VS_CONTROL, k, note=t.control_note))
        rows += [t.judge(vs[m], k) for m, kk in found
                 if kk == k and m in vs and ppo and t.of(Cell(m), k)]
    rows += [t.sign(m, k) for m, k in found]
    return pd.DataFrame([c.__dict__ for c in rows], columns=list(Claim.__dataclass_fields__))
