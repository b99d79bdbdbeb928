"""The random-reward experiment's analysis: Eq. 6 per update, entropy drift, claim verdicts.

Synthetic run dirs get hand-chosen numbers (entropy per step, covariance and entropy change
per update); every expected number below is worked out by hand from those choices.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis import make_figures
from analysis.core.entropy_law import (
    MEASURED,
    PREDICTED,
    entropy_drift,
    law_by_cell,
    pearson,
    seed_agreement,
    sign_agreement,
    summed_change,
    update_pairs,
)
from analysis.core.loader import load_runs
from analysis.core.stats import wilson
from analysis.figures.contract import SkipFigure
from analysis.figures.entropy_law import fig_entropy_law
from analysis.reports.random_reward import cell_table, random_suites, suite_claims

T2 = 4.303  # t(0.975, df=2): three seeds
STEPS, LAST_K = 4, 2  # drift = mean entropy of steps 2, 3 minus that of steps 0, 1
RANDOM = {"task.reward": "random", "task.reward_p": 0.5, "logger.entropy_change": True}
# Per cell and seed: the entropy drift, and how many of the run's updates (16 at 4x: 4 steps
# of 4; 4 at 1x) get a measured change of the opposite sign to the prediction.
DRIFT = {
    ("ppo", 1): [-0.01, 0.0, 0.01],
    ("ppo", 4): [-0.20, -0.21, -0.22],
    ("clip_0.8_1.5", 4): [0.05, 0.06, 0.07],
    ("clip_0.5_1.2", 4): [-0.20, -0.25, -0.15],
}
FLIPPED = {
    ("ppo", 1): [2, 2, 2],  # 2 of 4 agree per seed: 6 of 12
    ("ppo", 4): [4, 2, 6],  # 12, 14, 10 of 16 agree: 36 of 48
    ("clip_0.8_1.5", 4): [16, 16, 16],  # none agrees
    ("clip_0.5_1.2", 4): [8, 8, 8],  # 24 of 48
}


def predicted(n: int) -> np.ndarray:
    """The prediction -cov of update i of a run: i - (n - 1) / 2, never 0."""
    return np.arange(n) - (n - 1) / 2


def measured(n: int, flipped: int) -> np.ndarray:
    """1e-3 times the prediction, its sign flipped on the first `flipped` updates."""
    x = predicted(n) * 1e-3
    x[:flipped] *= -1
    return x


def rewrite(run, drift: float, flipped: int) -> None:
    """Put the hand-chosen numbers into the run's metrics.jsonl."""
    lines = [json.loads(x) for x in (run.path / "metrics.jsonl").read_text().splitlines()]
    n_updates = sum(r["kind"] == "update" for r in lines)
    x, y = predicted(n_updates), measured(n_updates, flipped)
    i = 0
    for rec in lines:
        if rec["kind"] == "update":
            rec.update(entropy_clip_cov=-x[i], entropy_change=y[i], entropy_after=1.0 + y[i])
            i += 1
        elif rec["kind"] == "step":
            rec["entropy_mean"] = 1.0 if rec["step"] < STEPS // 2 else 1.0 + drift
    (run.path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def write_cells(root, write_run, cells, mode: str) -> None:
    for (method, k), drifts in cells.items():
        for seed, drift in enumerate(drifts):
            run = write_run(root, method, k, seed, experiment=f"rr_{mode}", steps=STEPS,
                            extra_config={**RANDOM, "train.staleness_mode": mode}, tag=mode)
            rewrite(run, drift, FLIPPED[(method, k)][seed])


@pytest.fixture(scope="module")
def coin_flip_runs(tmp_path_factory):
    from tests.analysis.conftest import write_run

    root = tmp_path_factory.mktemp("random_reward")
    write_cells(root, write_run, DRIFT, "minibatch")
    # fixed_update mode: stale cells only, its 1x control is the minibatch suite's
    write_cells(root, write_run, {("ppo", 4): DRIFT[("ppo", 4)]}, "fixed_update")
    return root, load_runs([root])


def test_pearson_sign_agreement_and_wilson_by_hand():
    # x = 1, 2, 3; y = 1, 3, 2: deviations (-1, 0, 1), (-1, 1, 0): r = 1 / sqrt(2 * 2)
    assert pearson([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)
    assert math.isnan(pearson([1, 2], [1, 2])) and math.isnan(pearson([1, 1, 1], [1, 2, 3]))
    # zeros on either side have no sign: 3 counted, of which 2 agree
    assert sign_agreement(pd.Series([1.0, -2.0, 0.0, 3.0, 1.0]),
                          pd.Series([2.0, -1.0, 5.0, 0.0, -1.0])) == (2, 3)
    # Wilson 95% for 7 of 10 and 0 of 10 (published values: 0.3968-0.8922, 0-0.2775)
    share, low, high = wilson(7, 10)
    assert (share, round(low, 4), round(high, 4)) == (0.7, 0.3968, 0.8922)
    assert wilson(0, 10)[1] == 0.0 and round(wilson(0, 10)[2], 4) == 0.2775
    assert all(math.isnan(v) for v in wilson(0, 0))


def _wilson_roots(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson bounds solved independently: the p where (k/n - p)^2 = z^2 p (1-p) / n."""
    ph = k / n
    # (1 + z^2/n) p^2 - (2 ph + z^2/n) p + ph^2 = 0
    roots = np.roots([1 + z * z / n, -(2 * ph + z * z / n), ph * ph])
    return float(min(roots)), float(max(roots))


def test_the_suites_are_told_apart_by_reward_and_mode(coin_flip_runs):
    _, runs = coin_flip_runs
    assert len(random_suites(runs)) == 2
    assert {r.cfg("task.reward") for r in runs.runs} == {"random"}


def test_drift_correlation_and_agreement_match_the_chosen_numbers(coin_flip_runs):
    _, runs = coin_flip_runs
    mini = runs.subset(lambda r: r.cfg("train.staleness_mode") == "minibatch")
    drift = entropy_drift(mini, LAST_K).set_index(["method", "staleness", "seed"])["drift"]
    for (method, k), values in DRIFT.items():
        for seed, value in enumerate(values):
            assert drift[(method, k, seed)] == pytest.approx(value)
    law = law_by_cell(update_pairs(mini)).set_index(["method", "staleness"])
    ppo = law.loc[("ppo", 4)]
    assert (ppo["updates"], ppo["seeds"], ppo["agree"], ppo["counted"]) == (48, 3, 36, 48)
    assert (ppo["agree_low"], ppo["agree_high"]) == pytest.approx(_wilson_roots(36, 48))
    # per-seed r by the textbook formula, then mean and t-interval over the three seeds
    x = predicted(16)
    per_seed = []
    for flipped in FLIPPED[("ppo", 4)]:
        y = measured(16, flipped)
        dx, dy = x - x.mean(), y - y.mean()
        per_seed.append((dx * dy).sum() / math.sqrt((dx * dx).sum() * (dy * dy).sum()))
    half = T2 * np.std(per_seed, ddof=1) / math.sqrt(3)
    assert ppo["r_mean"] == pytest.approx(np.mean(per_seed))
    assert (ppo["r_low"], ppo["r_high"]) == pytest.approx((np.mean(per_seed) - half,
                                                          np.mean(per_seed) + half))
    xs = np.tile(x, 3)
    ys = np.concatenate([measured(16, f) for f in FLIPPED[("ppo", 4)]])
    dx, dy = xs - xs.mean(), ys - ys.mean()
    assert ppo["r_pooled"] == pytest.approx((dx * dy).sum() / math.sqrt((dx**2).sum() * (dy**2).sum()))
    assert law.loc[("clip_0.8_1.5", 4), "agree"] == 0
    assert law.loc[("ppo", 1), ["agree", "counted"]].tolist() == [6, 12]


def test_summed_update_change_adds_each_runs_measured_changes(coin_flip_runs):
    _, runs = coin_flip_runs
    mini = runs.subset(lambda r: r.cfg("train.staleness_mode") == "minibatch")
    summed = summed_change(update_pairs(mini)).set_index(["method", "staleness", "seed"])
    # ppo 4x: predictions i - 7.5 (i = 0..15) sum to 0, so the sum is -2e-3 times the sum
    # of the flipped ones: 4 flipped -2e-3 * (-7.5 - 6.5 - 5.5 - 4.5) = 0.048; 2 -> 0.028;
    # 6 -> 0.060
    for seed, value in enumerate([0.048, 0.028, 0.060]):
        assert summed.loc[("ppo", 4, seed), "summed_change"] == pytest.approx(value)
    # ppo 1x: 4 updates, predictions -1.5, -0.5, 0.5, 1.5, the first 2 flipped: 2e-3 * 2 = 0.004
    assert summed.loc[("ppo", 1, 0), "summed_change"] == pytest.approx(0.004)
    table = cell_table(mini, pd.DataFrame({"suite": [], "method": [], "staleness": [],
                                           "clip_frac": []}), LAST_K)
    row = table[(table["method"] == "ppo") & (table["staleness"] == "4x")].iloc[0]
    half = T2 * np.std([0.048, 0.028, 0.060], ddof=1) / math.sqrt(3)
    assert row["summed update change (nats/token)"] == f"{np.mean([0.048, 0.028, 0.060]):.4f} ± {half:.4f} (n=3)"


def _verdicts(claims: pd.DataFrame) -> dict[str, str]:
    return dict(zip(claims["claim"], claims["verdict"], strict=True))


def test_each_row_tests_its_own_direction_on_paired_and_per_seed_intervals(coin_flip_runs):
    _, runs = coin_flip_runs
    (suite,) = {r.suite for r in runs.runs if r.cfg("train.staleness_mode") == "minibatch"}
    claims = suite_claims(runs, suite, LAST_K)
    v = _verdicts(claims)
    mode = f"minibatch mode, {STEPS} steps"
    # control drifts -0.01, 0, 0.01: expected no drift; the interval holds 0, which cannot
    # show the absence of a drift
    assert v["Entropy does not drift under random rewards without clipping (ppo at 1x, the "
             f"control; {mode})"] == "not settled"
    # ppo: -0.21 ± 4.303 * 0.01 / sqrt(3) = ± 0.0248, wholly below 0: falls, as stated
    row = claims[claims["claim"].str.startswith("Symmetric clipping [0.8, 1.2] lowers")].iloc[0]
    assert row["verdict"] == "held" and row["value"] == pytest.approx(-0.21)
    assert row["measured"] == "-0.210 ± 0.025 (n=3)"
    # clip_0.5_1.2 is expected to fall: -0.2 ± 4.303 * 0.05 / sqrt(3) = ± 0.124, below 0
    assert v[f"Entropy falls under random rewards (clip_0.5_1.2, [0.5, 1.2], at 4x, {mode})"] == "held"
    # clip_0.8_1.5 ("falls less than ppo, or rises") names no direction of its own: only
    # its paired row against ppo tests it
    assert not any("(clip_0.8_1.5, [0.8, 1.5]" in c for c in v)
    # ppo 4x - control by seed: -0.19, -0.21, -0.23: -0.21 ± 0.0497, below 0
    assert v[f"Clipping lowers entropy below the unclipped control under random rewards "
             f"(ppo at 4x vs 1x, {mode})"] == "held"
    # clip_0.8_1.5 - ppo by seed: 0.25, 0.27, 0.29: 0.27 ± 0.0497, above 0 as stated
    high = claims[claims["claim"].str.startswith("Raising c_high")].iloc[0]
    assert high["verdict"] == "held" and high["value"] == pytest.approx(0.27)
    assert high["basis"] == f"clip_0.8_1.5 − ppo +0.270 ± {T2 * 0.02 / math.sqrt(3):.3f} (n=3; " \
                            "3 of 3 seeds > 0)"
    # clip_0.5_1.2 - ppo by seed: 0, -0.04, +0.07: mean +0.01, sd 0.0557: holds 0
    low_row = claims[claims["claim"].str.startswith("Lowering c_low")].iloc[0]
    assert low_row["verdict"] == "not settled"
    assert low_row["value"] == pytest.approx(0.01)
    assert "1 of 3 seeds < 0" in low_row["basis"]
    # Eq. 6 sign rows, per seed then a t-interval over seeds:
    # ppo 1x: 2 of 4 on every seed -> no spread over seeds, so the pooled Wilson interval
    #   decides: 6 of 12 holds 0.5, not settled
    # ppo 4x: 12, 14, 10 of 16 -> 0.75, 0.875, 0.625: 0.75 ± 4.303 * 0.125 / sqrt(3)
    #   = ± 0.311, which holds 0.5 (a Wilson interval over the 48 updates, [0.61, 0.85],
    #   would have called it held)
    # clip_0.8_1.5: 0 of 16 on every seed -> no spread; pooled 0 of 48, Wilson [0, 0.074]:
    #   wholly below 0.5
    sign = {c: x for c, x in v.items() if c.startswith("The covariance predicts")}
    assert sign == {
        f"The covariance predicts the sign of the per-update entropy change better than "
        f"chance ({m} at {k}x, {mode}; Eq. 6)": verdict
        for (m, k), verdict in {("ppo", 1): "not settled", ("ppo", 4): "not settled",
                                ("clip_0.8_1.5", 4): "not held",
                                ("clip_0.5_1.2", 4): "not settled"}.items()
    }
    ppo4 = claims[claims["claim"].str.contains(r"chance \(ppo at 4x")].iloc[0]
    assert ppo4["measured"] == f"0.750 ± {T2 * 0.125 / math.sqrt(3):.3f} (n=3)"
    # no "± 0.000": the degenerate rows name the pooled Wilson interval they rest on
    high = claims[claims["claim"].str.contains(r"chance \(clip_0.8_1.5 at 4x")].iloc[0]
    z = 1.959964  # Wilson upper end of 0 of n: z^2 / (n + z^2)
    assert high["basis"] == (f"0.000 [0.000, {z * z / (48 + z * z):.3f}] (0 of 48; Wilson, "
                             "pooled updates); every seed 0.000")
    assert "± 0.000" not in high["measured"] and "judged on the Wilson interval" in high["note"]


def test_seed_agreement_gives_each_seeds_share(coin_flip_runs):
    _, runs = coin_flip_runs
    mini = runs.subset(lambda r: r.cfg("train.staleness_mode") == "minibatch")
    shares = seed_agreement(update_pairs(mini)).set_index(["method", "staleness", "seed"])
    assert shares.loc[("ppo", 4), "share"].tolist() == [12 / 16, 14 / 16, 10 / 16]
    law = law_by_cell(update_pairs(mini)).set_index(["method", "staleness"]).loc[("ppo", 4)]
    half = T2 * 0.125 / math.sqrt(3)  # shares 0.75, 0.875, 0.625: sd 0.125
    assert (law["seed_agree_mean"], law["seed_agree_n"]) == (pytest.approx(0.75), 3)
    assert law["seed_agree_high"] - law["seed_agree_mean"] == pytest.approx(half)


def test_a_suite_without_its_own_control_borrows_the_1x_runs_of_another_mode(coin_flip_runs):
    _, runs = coin_flip_runs
    (suite,) = {r.suite for r in runs.runs if r.cfg("train.staleness_mode") == "fixed_update"}
    claims = suite_claims(runs, suite, LAST_K)
    row = claims[claims["claim"].str.startswith("Clipping lowers entropy below")].iloc[0]
    assert row["verdict"] == "held" and "minibatch-mode runs" in row["note"]
    assert not claims["claim"].str.contains("the control").any()  # counted once, in its suite
    assert len(claims) == 3  # ppo drift, its comparison with the control, its sign row


def test_suites_that_differ_only_in_steps_are_told_apart_by_the_steps_column(tmp_path, write_run):
    # the sweep runs the same minibatch cells at two step counts: one suite each, and the
    # table's steps column (not the long suite name) tells their rows apart
    for n, drifts in ((STEPS, [-0.01, 0.0, 0.01]), (2 * STEPS, [0.1, 0.2, 0.3])):
        for seed, drift in enumerate(drifts):
            run = write_run(tmp_path, "ppo", 4, seed, experiment="rr", steps=n,
                            extra_config=RANDOM, tag=f"steps{n}")
            rewrite(run, drift, 0)
    runs = load_runs([tmp_path])
    assert len(random_suites(runs)) == 2
    table = cell_table(runs, pd.DataFrame({"suite": [], "method": [], "staleness": [],
                                           "clip_frac": []}), LAST_K)
    assert "suite" not in table.columns
    by_steps = table.set_index("steps")["entropy drift (nats/token)"]
    half = T2 * 0.1 / math.sqrt(3)  # sd of 0.1, 0.2, 0.3 is 0.1
    assert by_steps[str(STEPS)].startswith("0.0000 ± ")
    assert by_steps[str(2 * STEPS)] == f"0.2000 ± {half:.4f} (n=3)"
    long = next(s for s in random_suites(runs) if any(
        r.suite == s and r.cfg("train.steps") == 2 * STEPS for r in runs.runs))
    claims = suite_claims(runs, long, LAST_K)
    assert claims["claim"].str.contains(f"minibatch mode, {2 * STEPS} steps").all()


@pytest.mark.slow
def test_figure_and_report_from_coin_flip_runs(coin_flip_runs, opts, tmp_path):
    root, runs = coin_flip_runs
    mini = runs.subset(lambda r: r.cfg("train.staleness_mode") == "minibatch")
    res = fig_entropy_law(mini, opts)
    assert res.paths[0].stat().st_size > 0
    assert len(res.data) == 3 * (1 * STEPS + 3 * 4 * STEPS)  # every update of 3 seeds
    assert res.data["predicted"].tolist()[:3] == pytest.approx(predicted(4)[:3])
    # The rank correlation per cell, by hand: Pearson's r of the ranks (mean rank for ties).
    for row in res.extra["law"].itertuples():
        d = res.data[(res.data["method"] == row.method) & (res.data["staleness"] == row.staleness)]
        x, y = d[PREDICTED].rank().to_numpy(), d[MEASURED].rank().to_numpy()
        want = np.corrcoef(x, y)[0, 1] if x.std() and y.std() else math.nan
        assert row.spearman_pooled == pytest.approx(want, nan_ok=True)
    out = tmp_path / "out"
    assert make_figures.main(["--runs", str(root), "--out", str(out), "--formats", "png",
                              "--last-k", str(LAST_K)]) == 0
    text = (out / "REPORT.md").read_text()
    assert "## Random-reward experiment" in text
    assert f"| fixed_update | ppo | [0.8, 1.2] | 4x | {STEPS} | -0.2100 ± 0.0248 (n=3) |" in text
    claims = pd.read_csv(out / "claims.csv")
    assert not claims["claim"].str.contains("bapo beats").any()  # no learning claims
    assert (out / "fig_entropy_law.png").exists()


def test_runs_without_entropy_change_skip_the_figure_and_the_section(runset, opts, tmp_path,
                                                                     sweep):
    with pytest.raises(SkipFigure, match="entropy_change"):
        fig_entropy_law(runset, opts)
    assert random_suites(runset) == []
    out = tmp_path / "out"
    make_figures.main(["--runs", str(sweep[0]), "--out", str(out), "--formats", "png",
                       "--only", "fig_entropy_law"])
    text = (out / "REPORT.md").read_text()
    assert "Random-reward" not in text and "- skipped `fig_entropy_law`" in text


def test_coin_flip_runs_without_entropy_change_get_no_data_sign_rows(tmp_path, write_run):
    for seed in (0, 1):
        write_run(tmp_path, "ppo", 4, seed, experiment="rr", steps=STEPS,
                  extra_config={"task.reward": "random"})
    runs = load_runs([tmp_path])
    (suite,) = random_suites(runs)
    claims = suite_claims(runs, suite, LAST_K).set_index("claim")
    sign = claims[claims.index.str.startswith("The covariance predicts")]
    assert sign["verdict"].tolist() == ["no data"] and "entropy_change" in sign["note"].iat[0]
    assert claims["verdict"].iat[0] != "no data"  # its drift row still has numbers
