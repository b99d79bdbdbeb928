"""Per-run summary, results table, claims and REPORT.md, against numbers computed here."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.claims.paper import claims_table
from analysis.claims.rules import VERDICTS
from analysis.core.summary import run_summary
from analysis.reports.paper import write_report
from analysis.reports.paper_tables import results_table


def test_run_summary_matches_the_written_records(sweep, runset):
    _, written = sweep
    s = run_summary(runset, last_k=2).set_index(["method", "staleness", "seed"])
    for key, syn in written.items():
        steps = pd.DataFrame(syn.steps)
        row = s.loc[key]
        assert row["final_reward"] == pytest.approx(steps["reward_mean"].tail(2).mean())
        drift = steps["entropy_mean"].tail(2).mean() - steps["entropy_mean"].head(2).mean()
        assert row["entropy_drift"] == pytest.approx(drift)
        assert row["clip_frac"] == pytest.approx(steps["clip_frac"].mean())
        # final: the mean of the last three evals after step 0 (4 steps, an eval every 2:
        # steps 2 and 4, both of them)
        trained = [e for e in syn.evals if e["step"] > 0][-3:]
        assert [e["step"] for e in trained] == [2, 4]
        assert row["final_sampled_acc"] == pytest.approx(
            sum(e["sampled_accuracy"] for e in trained) / 2)
        assert row["final_greedy_acc"] == pytest.approx(
            sum(e["greedy_accuracy"] for e in trained) / 2)
        assert (row["final_evals"], row["final_eval_steps"]) == (2, "2/4")
        assert row["final_updates"] == f"{2 * key[1]}/{4 * key[1]}"  # k updates a step at kx
        if key[0] == "bapo":
            assert row["rho"] == pytest.approx(steps["rho"].mean())
        else:
            assert math.isnan(row["rho"])  # rho is reported for bapo only


def test_results_table_mean_and_interval_over_seeds(sweep, runset):
    _, written = sweep
    res = results_table(run_summary(runset)).set_index(["method", "staleness", "metric"])
    acc = np.array([np.mean([e["sampled_accuracy"] for e in written[("bapo", 4, s)].evals
                             if e["step"] > 0]) for s in (0, 1)])
    row = res.loc[("bapo", 4, "final_sampled_acc")]
    half = 12.706 * acc.std(ddof=1) / math.sqrt(2)
    assert row["n"] == 2 and row["mean"] == pytest.approx(acc.mean())
    assert row["ci_high"] - row["mean"] == pytest.approx(half)
    one = res.loc[("top_entropy", 4, "final_reward")]  # one seed: mean, no interval
    assert one["n"] == 1 and math.isnan(one["ci_low"])


def _summary(rows: list[tuple]) -> pd.DataFrame:
    cols = [
        "method",
        "staleness",
        "seed",
        "pos_contrib",
        "token_share_neg",
        "length_pos",
        "length_neg",
        "clip_frac",
        "entropy_drift",
        "c_low",
        "c_high",
        "final_sampled_acc",
        "grad_clip_share",
    ]
    s = pd.DataFrame(rows, columns=cols)
    return s.assign(suite="grid", experiment=[f"staleness_{k}x" for k in s["staleness"]])


T1, T2 = 12.706, 4.303  # t(0.975, df): two seeds, three seeds (any Student-t table)


def test_claim_verdicts_rest_on_paired_intervals_and_the_papers_levels():
    s = _summary(
        [
            # method, k, seed, pos, neg_tok, len+, len-, clip, drift, c_low, c_high, acc, gclip
            ("ppo", 1, 0, 0.50, 0.70, 10, 14, 0.00, -0.10, 0.8, 1.2, 0.30, 0.0),
            ("ppo", 1, 1, 0.50, 0.70, 10, 14, 0.00, -0.10, 0.8, 1.2, 0.30, 0.0),
            ("ppo", 1, 2, 0.50, 0.70, 10, 14, 0.00, -0.10, 0.8, 1.2, 0.30, 0.0),
            ("ppo", 4, 0, 0.38, 0.80, 10, 20, 0.20, -0.30, 0.8, 1.2, 0.30, 0.2),
            ("ppo", 4, 1, 0.39, 0.50, 11, 21, 0.21, -0.10, 0.8, 1.2, 0.31, 0.2),
            ("ppo", 4, 2, 0.40, 0.20, 12, 23, 0.22, 0.20, 0.8, 1.2, 0.32, 0.2),
            # 8x: a level the paper never ran; shown, never deciding
            ("ppo", 8, 0, 0.60, 0.70, 10, 14, 0.30, -0.50, 0.8, 1.2, 0.20, 0.5),
            ("ppo", 8, 1, 0.61, 0.70, 10, 14, 0.31, -0.50, 0.8, 1.2, 0.20, 0.5),
            ("ppo", 8, 2, 0.62, 0.70, 10, 14, 0.32, -0.50, 0.8, 1.2, 0.20, 0.5),
            ("bapo", 4, 0, 0.44, 0.75, 10, 12, 0.10, 0.20, 0.50, 2.00, 0.40, 0.2),
            ("bapo", 4, 1, 0.45, 0.75, 10, 12, 0.10, 0.20, 0.52, 2.05, 0.42, 0.2),
            ("bapo", 4, 2, 0.47, 0.75, 10, 12, 0.10, 0.20, 0.54, 2.10, 0.41, 0.2),
            ("clip_higher", 4, 0, 0.5, 0.7, 10, 12, 0.1, 0.1, 0.8, 1.28, 0.50, 0.2),
            ("clip_higher", 4, 1, 0.5, 0.7, 10, 12, 0.1, 0.1, 0.8, 1.28, 0.51, 0.2),
            ("clip_higher", 4, 2, 0.5, 0.7, 10, 12, 0.1, 0.1, 0.8, 1.28, 0.52, 0.2),
            # drift of ppo plus 0.02, 0.03, 0.04: unpaired intervals overlap, pairs do not
            ("clip_0.8_1.5", 4, 0, 0.5, 0.7, 10, 12, 0.1, -0.28, 0.8, 1.5, 0.3, 0.05),
            ("clip_0.8_1.5", 4, 1, 0.5, 0.7, 10, 12, 0.1, -0.07, 0.8, 1.5, 0.3, 0.05),
            ("clip_0.8_1.5", 4, 2, 0.5, 0.7, 10, 12, 0.1, 0.24, 0.8, 1.5, 0.3, 0.05),
            ("clip_0.5_1.2", 4, 0, 0.5, 0.7, 10, 12, 0.1, 0.50, 0.5, 1.2, 0.3, 0.2),  # one seed
        ]
    )
    c = claims_table(s).set_index("claim")

    def row(text):
        return c.filter(like=text, axis=0).iloc[0]

    half = T2 * 0.01 / math.sqrt(3)  # sd 0.01 over three seeds: ± 0.0248
    r = row("Negative tokens carry")  # 4x: 0.61 ± 0.025 held; 8x: 0.39 ± 0.025 not held
    assert r["value"] == pytest.approx(0.61) and r["verdict"] == "held"
    assert r["measured"] == f"4x: 0.610 ± {half:.3f} (n=3); 8x: 0.390 ± {half:.3f} (n=3)"
    assert r["note"] == "4x held, 8x not held; 8x not run in the paper: shown, not deciding"
    assert r["experiments"] == "staleness_4x, staleness_8x"
    # judged against the paper's ~0.80, read as [0.75, 0.85] (schema.about), not against 0.5
    r = row("Negative tokens are ~0.80")  # 4x: 0.5 ± 0.745, reaching into the band
    assert r["verdict"] == "not settled" and "within [0.75, 0.85]" in r["criterion"]
    assert r["note"].startswith("4x not settled (mean outside the range; its 95% interval "
                                "reaches into it)")
    # lengths within each run: 10, 10, 11 -> mean 10.333, sd 0.577, ± 4.303 * 0.577 / 1.732
    r = row("Negative responses are longer")
    assert r["verdict"] == "held" and r["value"] == pytest.approx(31 / 3)
    assert f"4x: A<0 − A>0 +10.333 ± {T2 * math.sqrt(1 / 3) / math.sqrt(3):.3f} (n=3; 3 of 3 " \
           "seeds > 0)" in r["basis"]
    r = row("clip fraction")  # 4x - 1x by seed: 0.20, 0.21, 0.22
    assert r["verdict"] == "held" and r["value"] == pytest.approx(0.21)
    # ... and it holds by construction (1x clips nothing): shown, no p, so no Holm test
    assert r["by_construction"].startswith("at 1x every IS ratio is 1") and math.isnan(r["p"])
    assert row("Negative responses are longer")["by_construction"] == ""  # no ramble runs
    assert r["basis"].startswith(f"4x: 4x − 1x +0.210 ± {half:.3f} (n=3; 3 of 3 seeds > 0)")
    assert "4x confound: gradient-norm clipping binds on 20% (4x) vs 0% (1x)" in r["note"]
    # drift 4x - 1x by seed: -0.2, 0, 0.3 (not settled); 8x - 1x: -0.4 on every seed, no
    # spread and so no interval (not settled either, and not deciding)
    r = row("entropy fall under ppo")
    assert r["verdict"] == "not settled" and r["value"] == pytest.approx(0.1 / 3)
    assert r["note"].startswith("4x not settled (paired 95% interval includes 0), 8x not "
                                "settled (paired differences: every seed equal: no interval); "
                                "8x not run in the paper")
    assert "8x: 8x − 1x -0.400 (n=3; 3 of 3 seeds < 0; every seed equal: no interval)" in r["basis"]
    r = row("c_high settles")  # 2.05 ± 0.124: inside [1.9, 2.2]
    assert r["value"] == pytest.approx(2.05) and r["verdict"] == "held"
    r = row("c_low settles")  # 0.52 ± 0.050: wholly below 0.65
    assert r["verdict"] == "not held"
    # 0.44, 0.45, 0.47: mean 0.4533, sd 0.01528, ± 0.0380 reaches below 0.43
    r = row("positive contribution (bapo")
    assert r["verdict"] == "not settled" and "mean inside the range" in r["note"]
    # bapo - ppo by seed: 0.06, 0.06, 0.07: mean 0.0633, sd 0.00577, ± 0.0143
    r = row("raises the positive contribution")
    assert r["value"] == pytest.approx(0.19 / 3) and r["verdict"] == "held"
    assert "3 of 3 seeds > 0" in r["basis"]
    r = row("bapo beats ppo at 4x")  # 0.10, 0.11, 0.09: 0.10 ± 0.0248
    assert r["value"] == pytest.approx(0.10) and r["verdict"] == "held"
    r = row("bapo beats clip_higher at 4x")  # -0.10, -0.09, -0.11: the other direction
    assert r["verdict"] == "not held"
    assert "0 of 3 seeds > 0" in r["basis"]
    assert row("bapo beats ppo at 2x")["verdict"] == "no data"
    # clip_0.8_1.5 - ppo drift by seed: 0.02, 0.03, 0.04: mean 0.03 ± 0.0248, wholly above
    # 0, though the two unpaired intervals (± 0.62 each) overlap almost entirely
    r = row("Raising c_high")
    assert r["value"] == pytest.approx(0.03) and r["verdict"] == "held"
    assert r["basis"] == f"clip_0.8_1.5 − ppo +0.030 ± {half:.3f} (n=3; 3 of 3 seeds > 0)"
    assert r["note"] == ("confound: gradient-norm clipping binds on 5% (clip_0.8_1.5) vs 20% "
                         "(ppo) of updates")
    r = row("Lowering c_low")  # one seed of clip_0.5_1.2: no interval
    assert r["verdict"] == "not settled" and r["note"] == "one seed: no interval"
    assert set(c["verdict"]) <= {"held", "not held", "not settled", "no data"}


def test_verdict_counts_name_settled_and_unsettled_apart():
    from analysis.reports.markdown import verdict_counts

    claims = pd.DataFrame({"verdict": ["held", "not settled", "held", "no data", "not held"]})
    assert verdict_counts(claims) == "2 held, 1 not held, 1 not settled, 1 no data"


def test_write_report(sweep, runset, tmp_path):
    from analysis.reports.paper_sections import SuiteFigures

    summary = run_summary(runset)
    (suite,) = runset.suites
    figures = [SuiteFigures(suite, ".", ["fig02_x"], [("fig07_y", "no runs named z")])]
    path, results, claims = write_report(runset, summary, tmp_path, ["runs"], figures, 5)
    text = path.read_text()
    assert path.name == "REPORT.md" and (tmp_path / "results.csv").exists()
    # Every table names the experiment of each row.
    assert "| sweep | bapo | 4x |" in text and "- skipped `fig07_y`: no runs named z" in text
    assert "| experiment | method | staleness | seeds | steps |" in text
    assert set(claims["verdict"]) <= set(VERDICTS)
    assert (claims["experiments"].str.len() > 0).any()
    # Every cell of the results table comes from the frame written next to it.
    mean = results.set_index(["method", "staleness", "metric"]).loc[("ppo", 2, "clip_frac")]
    assert f"{mean['mean']:.3f} ± {(mean['ci_high'] - mean['ci_low']) / 2:.3f} (n=2)" in text
    assert list(results.columns[:4]) == ["suite", "experiment", "method", "staleness"]


def test_search_outcomes_counts_each_ending():
    from analysis.core.search_outcomes import outcome_table
    from src.algorithms import METHODS

    traits = METHODS["bapo"].traits

    # Hand-made update records of one bapo run at 4x and one ppo run (left out).
    def upd(method, update, steps, reached, undefined, rho_b, rho, c_low, c_high):
        return dict(
            run_id=f"r/{method}",
            method=method,
            staleness=4,
            seed=0,
            step=0,
            update=update,
            bapo_steps=steps,
            bapo_reached=reached,
            bapo_undefined=undefined,
            rho_before=rho_b,
            rho=rho,
            c_low=c_low,
            c_high=c_high,
            skipped=False,
        )

    updates = pd.DataFrame(
        [
            upd("bapo", 0, 0, True, False, 0.6, 0.6, 0.6, 1.2),  # on-policy, at start
            upd("bapo", 1, 0, True, False, 0.5, 0.5, 0.6, 1.2),  # at start
            upd("bapo", 2, 7, True, False, 0.3, 0.41, 0.7, 1.5),  # moved, reached
            upd("bapo", 3, 51, False, False, 0.1, 0.12, 0.9, 3.0),  # not reached
            upd("bapo", 1, 0, None, True, None, None, 0.6, 1.2),  # undefined
            upd("ppo", 1, 0, None, None, 0.2, 0.2, 0.8, 1.2),
        ]
    )
    t = outcome_table(updates, {"r/bapo"}, traits).set_index("updates")
    stale = t.loc["1..k-1 (stale)"]
    assert stale["n"] == 4
    assert (stale["at start"], stale["moved, reached"]) == (0.25, 0.25)
    assert (stale["not reached"], stale["undefined"]) == (0.25, 0.25)
    assert stale["rho before"] == pytest.approx((0.5 + 0.3 + 0.1) / 3)
    assert stale["c_high"] == pytest.approx((1.2 + 1.5 + 3.0 + 1.2) / 4)
    on = t.loc["0 (on-policy)"]
    assert on["n"] == 1 and on["at start"] == 1.0
    assert outcome_table(updates.drop(columns="bapo_steps"), {"r/bapo"}, traits).empty


def test_a_row_holds_by_construction_only_where_its_condition_does(tmp_path, write_run):
    from analysis.claims.paper import claims_table
    from analysis.core.loader import load_runs

    # the synthetic writer gives A<0 responses 12 tokens and A>0 ones 8 (RESP_LEN + 4, 8):
    # with a 12-token cap every A<0 response and no A>0 one runs to it
    ramble = {"task.params.ramble_fraction": 0.3, "rollout.max_new_tokens": 12}
    for seed in (0, 1):
        write_run(tmp_path / "ramble", "ppo", 2, seed, extra_config=ramble)
        write_run(tmp_path / "plain", "ppo", 2, seed, extra_config={"rollout.max_new_tokens": 12})
    for where, built in (("ramble", True), ("plain", False)):
        runs = load_runs([tmp_path / where])
        c = claims_table(run_summary(runs), runs=runs).set_index("claim")
        row = c.filter(like="Negative responses are longer", axis=0).iloc[0]
        if built:
            assert row["by_construction"].startswith("the ramble task makes 30%")
            assert "at the 12-token cap: 2x 100% of A<0 responses vs 0% of A>0" in row["by_construction"]
            assert math.isnan(row["p"])
        else:
            assert row["by_construction"] == ""


def test_rows_that_hold_by_construction_are_shown_but_neither_counted_nor_tested():
    from analysis.claims.verdicts import table
    from analysis.reports.claim_counts import claim_counts
    from analysis.reports.markdown import holm_counts, shown_claims, verdict_counts

    claims = pd.DataFrame({"claim": ["a", "b", "c"], "note": ["", "", "x"],
                           "verdict": ["held", "held", "not held"],
                           "p": [0.01, math.nan, 0.02], "by_construction": ["", "1x is 0", ""]})
    t = table(claims)
    # two tests, not three: Holm's m counts the rows that are evidence; b keeps its verdict
    assert t["tests"].iat[0] == 2 and t.loc[1, "holm_verdict"] == "held"
    assert t.loc[0, "holm_p"] == pytest.approx(0.02) and t.loc[2, "holm_p"] == pytest.approx(0.02)
    assert verdict_counts(t) == "1 held, 1 not held; 1 by construction (shown, not counted)"
    assert holm_counts(t).startswith("After Holm's correction over the 2 tested rows: 1 held")
    shown = shown_claims(t)
    assert shown.loc[1, "verdict"] == "held (by construction)"
    assert shown.loc[1, "note"] == "holds by construction, not counted: 1x is 0"
    assert shown.loc[1, "after Holm"] == "held (by construction; not among the 2)"
    counts = claim_counts(t.assign(suite="s"), {"s": "S1"}).set_index("label")
    assert counts.loc["S1", ["held", "not held", "total", "by construction"]].tolist() == [1, 1, 2, 1]


def test_entropy_drift_windows_hold_equal_updates_where_levels_share_an_update_budget(
        tmp_path, write_run):
    from analysis.core.loader import load_runs
    from analysis.core.summary import drift_windows

    # one update budget: 8 steps at 1x, 4 at 2x (8 updates each): one suite
    for seed in (0, 1):
        write_run(tmp_path, "ppo", 1, seed, steps=8)
        write_run(tmp_path, "ppo", 2, seed, steps=4)
    runs = load_runs([tmp_path])
    assert len(runs.suites) == 1
    # last_k = 2 steps of the stalest level = 4 updates: 4 steps at 1x, 2 at 2x
    assert {r.staleness: drift_windows(runs, 2)[r.run_id] for r in runs.runs} == {1: 4, 2: 2}
    s = run_summary(runs, last_k=2).set_index(["staleness", "seed"])
    for r in runs.runs:
        e = runs.steps[runs.steps["run_id"] == r.run_id].sort_values("step")["entropy_mean"]
        k = 4 if r.staleness == 1 else 2
        assert s.loc[(r.staleness, r.seed), "entropy_drift"] == pytest.approx(
            e.tail(k).mean() - e.head(k).mean())


def test_learning_is_each_runs_final_minus_its_own_step_0(sweep, runset, tmp_path):
    from analysis.reports.paper_tables import learning_table

    _, written = sweep
    s = run_summary(runset)
    for (method, k, seed), syn in written.items():
        evals = [e for e in syn.evals if e["step"] > 0][-3:]
        final = sum(e["sampled_accuracy"] for e in evals) / len(evals)
        start = next(e for e in syn.evals if e["step"] == 0)["sampled_accuracy"]
        got = s[(s["method"] == method) & (s["staleness"] == k) & (s["seed"] == seed)]
        assert got["gain_sampled_acc"].iat[0] == pytest.approx(final - start)
    table = learning_table(s, runset.suites).set_index(["method", "staleness"])
    gains = s[(s["method"] == "bapo") & (s["staleness"] == 4)]["gain_greedy_acc"]
    m, half = gains.mean(), 12.706 * gains.std(ddof=1) / math.sqrt(2)
    assert table.loc[("bapo", "4x"), "greedy: final − step 0"] == (
        f"{m:+.3f} ± {half:.3f} (n=2) ({int((gains > 0).sum())} of 2 > 0)")
