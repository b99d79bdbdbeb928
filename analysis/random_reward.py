"""The random-reward experiment in REPORT.md: its claim rows and its per-cell table.

Under `task.reward=random` the rewards are coin flips, so nothing can be learned and what
moves entropy is the clipping rule and staleness alone (the `random_reward` sweep). A suite
of such runs gets these rows instead of the paper's learning claims (accuracy, contribution
shares), which coin flips cannot test. The rows are hypotheses from the paper's account
(Eq. 6, Fig. 7), each settled by 95% intervals, never typed in.
"""

from __future__ import annotations

import math

import pandas as pd

from analysis import style
from analysis.cells import COMPARED, experiment_order, numeric_config
from analysis.entropy_law import entropy_drift, law_by_cell, summed_change, update_pairs
from analysis.loader import Run, RunSet
from analysis.stats import fmt_ci, mean_ci
from analysis.verdicts import Claim, below, greater, share_above

MODE_KEY = "train.staleness_mode"
# What the paper's account (Eq. 6: the clip rule removes low-probability positive tokens'
# push up, so entropy falls; Fig. 7: a higher c_high falls less, a lower c_low more) expects
# of each setting's drift. Text only; the verdict is computed from the runs.
EXPECTED = {
    "ppo": "falls (low-probability positive tokens are clipped)",
    "clip_0.5_1.2": "falls, faster than ppo",
    "clip_0.8_1.5": "falls less than ppo, or rises",
    "clip_higher": "falls less than ppo",
    "bapo": "falls less than ppo",
}
CONTROL_EXPECTED = "no drift from clipping: at 1x no bound binds"


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
    """The 1x ppo control of `suite`: its own, or else that of a random-reward suite that
    differs from it only in staleness mode. Returns (runs, note on where they come from)."""
    own = runs.select(lambda r: r.suite == suite)
    here = [r for r in own if r.method == "ppo" and r.staleness == 1]
    if here or not own:
        return here, ""
    key = _setting(own[0])
    there = [r for r in runs.select(is_random_reward)
             if r.method == "ppo" and r.staleness == 1 and _setting(r) == key]
    note = (f"1x control from the {mode(there)}-mode runs: at 1x every staleness mode is the "
            "same update") if there else ""
    return there, note


def _cells(runs: list[Run]) -> list[tuple[str, int]]:
    cells = {(r.method, r.staleness) for r in runs}
    order = style.method_order({m for m, _ in cells})
    return sorted(cells, key=lambda c: (c[1], order.index(c[0])))


def _experiments(runs: list[Run]) -> str:
    names = experiment_order({(r.experiment, r.staleness) for r in runs})
    return ", ".join(dict.fromkeys(names))  # one name may hold several staleness levels


def _bounds(runs: list[Run]) -> str:
    run = runs[0]
    if run.cfg("method.objective") == "bapo":
        return "adaptive bounds"
    lo, hi = run.method_param("c_low"), run.method_param("c_high")
    return f"[{lo:g}, {hi:g}]" if lo is not None and hi is not None else "no clip bounds"


def suite_claims(runs: RunSet, suite: str, last_k: int) -> pd.DataFrame:
    """The claim rows of one random-reward suite (columns of analysis/verdicts.Claim)."""
    own = runs.select(lambda r: r.suite == suite)
    control, control_note = control_runs(runs, suite)
    pool = {r.run_id for r in [*own, *control]}
    both = runs.subset(lambda r: r.run_id in pool)
    drift = entropy_drift(both, last_k).set_index("run_id")["drift"]
    law = law_by_cell(update_pairs(runs.subset(lambda r: r.suite == suite)))
    where = f"{mode(own)} mode, {steps(own)} steps"

    def of(method: str, k: int) -> list[Run]:
        return [r for r in own if r.method == method and r.staleness == k]

    def drift_of(cell_runs: list[Run]) -> pd.Series:
        return drift.reindex([r.run_id for r in cell_runs])

    def claim(text: str, paper: str, criterion: str, used: list[Run], note: str = "") -> Claim:
        return Claim(text, paper, criterion, experiments=_experiments(used), note=note)

    falls = (f"95% interval of the entropy drift (mean of the last {last_k} steps minus the "
             f"first {last_k}) below 0")
    rows = []
    if control and not control_note:  # a borrowed control has its row in its own suite
        rows.append(below(claim(f"Entropy falls under random rewards without clipping (ppo at "
                                f"1x, the control; {mode(control)} mode, {steps(control)} "
                                "steps)", CONTROL_EXPECTED, falls, control),
                          drift_of(control), 0.0))
    for method, k in _cells(own):
        if k == 1:
            continue  # the control, above
        cell = of(method, k)
        if method == "ppo":
            text = (f"Symmetric clipping {_bounds(cell)} lowers entropy under random rewards "
                    f"(ppo at {k}x, {where})")
        else:
            text = (f"Entropy falls under random rewards ({method}, {_bounds(cell)}, at {k}x, "
                    f"{where})")
        rows.append(below(claim(text, EXPECTED.get(method, "—"), falls, cell), drift_of(cell), 0.0))
    stale = sorted({k for _, k in _cells(own) if k > 1})
    for k in stale:
        ppo = of("ppo", k)
        if control and ppo:
            rows.append(greater(
                claim(f"Clipping lowers entropy below the unclipped control under random rewards "
                      f"(ppo at {k}x vs 1x, {where})", "lower at the stale setting",
                      "95% intervals: drift at 1x above the stale drift", [*control, *ppo],
                      control_note),
                drift_of(control), drift_of(ppo), ("1x", f"{k}x")))
        for other, text, paper, higher_first in (
            ("clip_0.8_1.5", "Raising c_high raises entropy", "higher entropy (less drop)", True),
            ("clip_0.5_1.2", "Lowering c_low lowers entropy", "lower entropy (more drop)", False),
        ):
            cell = of(other, k)
            if not (ppo and cell):
                continue
            a, b, names = ((cell, ppo, (other, "ppo")) if higher_first
                           else (ppo, cell, ("ppo", other)))
            rows.append(greater(
                claim(f"{text} under random rewards ({other} vs ppo at {k}x, {where}; Fig. 7)",
                      paper, f"95% intervals: drift of {names[0]} above {names[1]}", [*a, *b]),
                drift_of(a), drift_of(b), names))
    law = law.set_index(["method", "staleness"])
    for method, k in _cells(own):
        cell = of(method, k)
        c = claim(f"The covariance predicts the sign of the per-update entropy change better "
                  f"than chance ({method} at {k}x, {where}; Eq. 6)",
                  "sign(ΔH) = sign(−Cov(log π, A·X))",
                  "95% Wilson interval of the sign-agreement share above 0.5", cell)
        if (method, k) not in law.index:
            c.note = "no entropy_change in its update records (logger.entropy_change=true)"
            rows.append(c)
            continue
        c.note = "updates counted as independent"
        rows.append(share_above(c, int(law.loc[(method, k), "agree"]),
                                int(law.loc[(method, k), "counted"]), 0.5))
    return pd.DataFrame([c.__dict__ for c in rows], columns=list(Claim.__dataclass_fields__))


def cell_table(runs: RunSet, summary: pd.DataFrame, last_k: int) -> pd.DataFrame:
    """One formatted row per cell of every random-reward suite: drift, clip fraction,
    correlation and sign agreement."""
    rows = []
    suites = random_suites(runs)
    for suite in suites:
        part = runs.subset(lambda r, s=suite: r.suite == s)
        drift = entropy_drift(part, last_k)
        pairs = update_pairs(part)
        summed = summed_change(pairs)
        law = law_by_cell(pairs).set_index(["method", "staleness"])
        clip = summary[summary["suite"] == suite]
        for method, k in _cells(part.runs):
            cell = [r for r in part.runs if r.method == method and r.staleness == k]
            d = drift[(drift["method"] == method) & (drift["staleness"] == k)]["drift"]
            c = clip[(clip["method"] == method) & (clip["staleness"] == k)]["clip_frac"]
            row = {"suite": suite, "mode": mode(cell), "method": method,
                   "bounds": _bounds(cell), "staleness": style.staleness_label(k),
                   "steps": steps(cell),
                   "entropy drift (nats/token)": fmt_ci(*mean_ci(d), 4),
                   "clip frac": fmt_ci(*mean_ci(c), 4)}
            u = summed[(summed["method"] == method) & (summed["staleness"] == k)]
            if not u.empty:
                row["summed update change (nats/token)"] = fmt_ci(*mean_ci(u["summed_change"]), 4)
            if (method, k) in law.index:
                x = law.loc[(method, k)]
                row.update({
                    "r per seed": fmt_ci(x["r_mean"], x["r_low"], x["r_high"], int(x["r_seeds"]), 2),
                    "r pooled": "—" if math.isnan(x["r_pooled"]) else f"{x['r_pooled']:.2f}",
                    "sign agreement [95%]": (f"{x['agree_share']:.3f} [{x['agree_low']:.3f}, "
                                             f"{x['agree_high']:.3f}]") if x["counted"] else "—",
                    "updates": str(int(x["updates"]))})
            rows.append(row)
    table = pd.DataFrame(rows)
    if table.empty or len(suites) <= len(table[["mode", "steps"]].drop_duplicates()):
        table = table.drop(columns=["suite"], errors="ignore")  # mode and steps tell them apart
    return table.fillna("—")


def intro(last_k: int) -> str:
    """What the random-reward table's columns mean (REPORT.md)."""
    return (
        "Rewards are coin flips (`task.reward=random`): nothing can be learned, so what moves "
        "entropy is the clipping rule and staleness. Its suites' claim rows (under Paper "
        "claims) test the paper's entropy account in place of its learning claims. steps: "
        "rollout steps per run. "
        f"entropy drift: mean `entropy_mean` (behaviour policy) of the last {last_k} steps "
        f"minus the first {last_k}, per run; mean ± 95% Student-t half-width over seeds (n). "
        "clip frac: share of tokens whose gradient was clipped, mean over steps. summed "
        "update change: per run, the sum over its updates of the measured `entropy_change` "
        "(what the updates did to the entropy of their own tokens, without the sampling noise "
        "of fresh rollouts that the drift carries; a descriptive column, no claim row tests "
        "it); mean ± 95% Student-t half-width over seeds. r: Pearson "
        "correlation over updates of the Eq. 6 prediction −`entropy_clip_cov` with the measured "
        "`entropy_change` (the update's own mini-batch, after its optimizer step minus before); "
        "per seed: mean ± 95% Student-t half-width over the seeds' r; pooled: all the cell's "
        "updates. sign agreement: share of updates where the two have one sign (zeros left "
        "out), [95% Wilson interval], counting updates as independent. Figure: "
        "`fig_entropy_law`."
    )
