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

from analysis.claims.verdicts import Claim, directed, no_change, paired, share_above
from analysis.core import style
from analysis.core.cells import COMPARED, experiment_order, numeric_config
from analysis.core.entropy_law import (
    entropy_drift,
    law_by_cell,
    seed_agreement,
    summed_change,
    update_pairs,
)
from analysis.core.grad_clip import confound_note, grad_clip_share
from analysis.core.loader import Run, RunSet
from analysis.core.paired import DOWN, UP
from analysis.core.stats import fmt_ci, mean_ci

MODE_KEY = "train.staleness_mode"
# What the paper's account (Eq. 6: the clip rule removes low-probability positive tokens'
# push up, so entropy falls; Fig. 7: a higher c_high falls less, a lower c_low more) expects
# of each setting's drift: the text, the direction of the cell's own drift (None: the
# account names none on its own) and of its paired difference from ppo at the same level
# (None: no comparison). Each row tests its own stated direction; the verdict is computed.
EXPECTED: dict[str, tuple[str, int | None, int | None]] = {
    "ppo": ("falls (low-probability positive tokens are clipped)", DOWN, None),
    "clip_0.5_1.2": ("falls, faster than ppo", DOWN, DOWN),
    "clip_0.8_1.5": ("falls less than ppo, or rises", None, UP),
    "clip_higher": ("falls less than ppo", DOWN, UP),
    "bapo": ("falls less than ppo", DOWN, UP),
}
# The text of a comparison row with ppo, for the two asymmetric clips of Fig. 7.
VS_PPO_TEXT = {
    "clip_0.8_1.5": ("Raising c_high raises entropy", "higher entropy than ppo (less fall)"),
    "clip_0.5_1.2": ("Lowering c_low lowers entropy", "lower entropy than ppo (more fall)"),
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
    here = [r for r in own if r.method == style.BASELINE and r.staleness == 1]
    if here or not own:
        return here, ""
    key = _setting(own[0])
    there = [r for r in runs.select(is_random_reward)
             if r.method == style.BASELINE and r.staleness == 1 and _setting(r) == key]
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
    if run.traits.adaptive_bounds:
        return "adaptive bounds"
    lo, hi = run.method_param("c_low"), run.method_param("c_high")
    return f"[{lo:g}, {hi:g}]" if lo is not None and hi is not None else "no clip bounds"


def _direction_words(direction: int) -> str:
    return "falls" if direction == DOWN else "rises"


def suite_claims(runs: RunSet, suite: str, last_k: int) -> pd.DataFrame:
    """The claim rows of one random-reward suite (columns of analysis/verdicts.Claim).
    Comparisons are paired by seed; every row tests the direction it states."""
    own = runs.select(lambda r: r.suite == suite)
    control, control_note = control_runs(runs, suite)
    pool = {r.run_id for r in [*own, *control]}
    both = runs.subset(lambda r: r.run_id in pool)
    drift = entropy_drift(both, last_k).set_index("run_id")["drift"]
    clipped = grad_clip_share(both)
    law = law_by_cell(update_pairs(runs.subset(lambda r: r.suite == suite)))
    where = f"{mode(own)} mode, {steps(own)} steps"

    def of(method: str, k: int) -> list[Run]:
        return [r for r in own if r.method == method and r.staleness == k]

    def seeded(values: pd.Series, cell_runs: list[Run]) -> pd.Series:
        """`values` (by run_id) of the cell's runs, indexed by seed for pairing."""
        return pd.Series(values.reindex([r.run_id for r in cell_runs]).to_numpy(dtype=float),
                         index=[r.seed for r in cell_runs])

    def claim(text: str, paper: str, criterion: str, used: list[Run], note: str = "") -> Claim:
        return Claim(text, paper, criterion, experiments=_experiments(used), note=note)

    def compare(c: Claim, a: list[Run], b: list[Run], names: tuple[str, str],
                direction: int) -> Claim:
        c = paired(c, seeded(drift, a), seeded(drift, b), names, direction)
        confound = confound_note(seeded(clipped, a), seeded(clipped, b), names)
        c.note = "; ".join(x for x in (c.note, confound) if x)
        return c

    defined = (f"entropy drift (mean of the last {last_k} steps minus the first {last_k})")
    rows = []
    if control and not control_note:  # a borrowed control has its row in its own suite
        rows.append(no_change(claim(
            f"Entropy does not drift under random rewards without clipping (ppo at 1x, the "
            f"control; {mode(control)} mode, {steps(control)} steps)", CONTROL_EXPECTED,
            f"{defined}: not held when its 95% interval excludes 0", control),
            seeded(drift, control)))
    for method, k in _cells(own):
        text, direction, _ = EXPECTED.get(method, ("—", None, None))
        if k == 1 or direction is None:
            continue  # the control, above; or no direction of its own (see its ppo row)
        cell = of(method, k)
        words = _direction_words(direction)
        if method == style.BASELINE:
            title = (f"Symmetric clipping {_bounds(cell)} lowers entropy under random rewards "
                     f"(ppo at {k}x, {where})")
        else:
            title = (f"Entropy {words} under random rewards ({method}, {_bounds(cell)}, at {k}x, "
                     f"{where})")
        side = "below" if direction == DOWN else "above"
        rows.append(directed(claim(title, text, f"95% interval of the {defined} {side} 0", cell),
                             seeded(drift, cell), 0.0, direction))
    stale = sorted({k for _, k in _cells(own) if k > 1})
    for k in stale:
        ppo = of("ppo", k)
        if control and ppo:
            rows.append(compare(
                claim(f"Clipping lowers entropy below the unclipped control under random rewards "
                      f"(ppo at {k}x vs 1x, {where})", "lower at the stale setting",
                      f"paired by seed: drift at {k}x minus 1x below 0", [*control, *ppo],
                      control_note),
                ppo, control, (f"{k}x", "1x"), DOWN))
        for method, kk in _cells(own):
            _, _, vs_ppo = EXPECTED.get(method, ("—", None, None))
            cell = of(method, k)
            if kk != k or vs_ppo is None or not (ppo and cell):
                continue
            words = "higher" if vs_ppo == UP else "lower"
            text, paper = VS_PPO_TEXT.get(method, (f"{method} keeps entropy {words} than ppo",
                                                   f"{words} entropy than ppo"))
            side = "above" if vs_ppo == UP else "below"
            rows.append(compare(
                claim(f"{text} under random rewards ({method} vs ppo at {k}x, {where}; Fig. 7)",
                      paper, f"paired by seed: drift of {method} minus ppo {side} 0",
                      [*cell, *ppo]),
                cell, ppo, (method, "ppo"), vs_ppo))
    law = law.set_index(["method", "staleness"])
    for method, k in _cells(own):
        cell = of(method, k)
        c = claim(f"The covariance predicts the sign of the per-update entropy change better "
                  f"than chance ({method} at {k}x, {where}; Eq. 6)",
                  "sign(ΔH) = sign(−Cov(log π, A·X))",
                  "per seed: share of updates whose signs agree; 95% t-interval over seeds "
                  "above 0.5", cell)
        if (method, k) not in law.index:
            c.note = "no entropy_change in its update records (logger.entropy_change=true)"
            rows.append(c)
            continue
        shares = seed_agreement(update_pairs(runs.subset(
            lambda r, ids={x.run_id for x in cell}: r.run_id in ids)))["share"]
        pooled = law.loc[(method, k)]
        rows.append(share_above(c, shares, int(pooled["agree"]), int(pooled["counted"]), 0.5))
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
            g = clip[(clip["method"] == method) & (clip["staleness"] == k)].get(
                "grad_clip_share", pd.Series(dtype=float))
            row = {"suite": suite, "mode": mode(cell), "method": method,
                   "bounds": _bounds(cell), "staleness": style.staleness_label(k),
                   "steps": steps(cell),
                   "entropy drift (nats/token)": fmt_ci(*mean_ci(d), 4),
                   "clip frac": fmt_ci(*mean_ci(c), 4),
                   "grad-norm clipped": fmt_ci(*mean_ci(g), 2)}
            u = summed[(summed["method"] == method) & (summed["staleness"] == k)]
            if not u.empty:
                row["summed update change (nats/token)"] = fmt_ci(*mean_ci(u["summed_change"]), 4)
            if (method, k) in law.index:
                x = law.loc[(method, k)]
                row.update({
                    "r per seed": fmt_ci(x["r_mean"], x["r_low"], x["r_high"], int(x["r_seeds"]), 2),
                    "r pooled": "—" if math.isnan(x["r_pooled"]) else f"{x['r_pooled']:.2f}",
                    "sign agreement per seed": fmt_ci(
                        x["seed_agree_mean"], x["seed_agree_low"], x["seed_agree_high"],
                        int(x["seed_agree_n"])),
                    "pooled [Wilson 95%]": (f"{x['agree_share']:.3f} [{x['agree_low']:.3f}, "
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
        "clip frac: share of tokens whose gradient was clipped, mean over steps. grad-norm "
        "clipped: share of updates whose gradient norm was clipped at `train.grad_clip`. summed "
        "update change: per run, the sum over its updates of the measured `entropy_change` "
        "(what the updates did to the entropy of their own tokens, without the sampling noise "
        "of fresh rollouts that the drift carries; a descriptive column, no claim row tests "
        "it); mean ± 95% Student-t half-width over seeds. r: Pearson "
        "correlation over updates of the Eq. 6 prediction −`entropy_clip_cov` with the measured "
        "`entropy_change` (the update's own mini-batch, after its optimizer step minus before); "
        "per seed: mean ± 95% Student-t half-width over the seeds' r; pooled: all the cell's "
        "updates. sign agreement: share of updates where the two have one sign (zeros left "
        "out); per seed: each seed's share, mean ± 95% Student-t half-width over seeds (what "
        "the claim rows use: a run's updates share rollouts and momentum, so they are no "
        "independent draws); pooled: all the cell's updates with the Wilson interval that "
        "counts them as independent, descriptive only. Figure: `fig_entropy_law`."
    )
