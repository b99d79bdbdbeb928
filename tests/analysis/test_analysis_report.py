"""Per-run summary, results table, claims and REPORT.md, against numbers computed here."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.report import claims_table, results_table, write_report
from analysis.summary import run_summary


def test_run_summary_matches_the_written_records(sweep, runset):
    _, written = sweep
    s = run_summary(runset, last_k=2).set_index(["method", "staleness", "seed"])
    for key, syn in written.items():
        steps = pd.DataFrame(syn.steps)
        row = s.loc[key]
        assert row["final_reward"] == pytest.approx(steps["reward_mean"].tail(2).mean())
        drop = steps["entropy_mean"].iloc[0] - steps["entropy_mean"].tail(2).mean()
        assert row["entropy_drop"] == pytest.approx(drop)
        assert row["clip_frac"] == pytest.approx(steps["clip_frac"].mean())
        assert row["final_sampled_acc"] == pytest.approx(syn.evals[-1]["sampled_accuracy"])
        assert row["final_greedy_acc"] == pytest.approx(syn.evals[-1]["greedy_accuracy"])
        if key[0] == "bapo":
            assert row["rho"] == pytest.approx(steps["rho"].mean())
        else:
            assert math.isnan(row["rho"])  # rho is reported for bapo only


def test_results_table_mean_and_interval_over_seeds(sweep, runset):
    _, written = sweep
    res = results_table(run_summary(runset)).set_index(["method", "staleness", "metric"])
    acc = np.array([written[("bapo", 4, s)].evals[-1]["sampled_accuracy"] for s in (0, 1)])
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
        "entropy_drop",
        "c_low",
        "c_high",
        "final_sampled_acc",
    ]
    return pd.DataFrame(rows, columns=cols)


def test_claim_verdicts_on_hand_made_numbers():
    s = _summary(
        [
            # method, k, seed, pos, neg_tok, len+, len-, clip, drop, c_low, c_high, acc
            ("ppo", 1, 0, 0.50, 0.70, 10, 14, 0.00, 0.10, 0.8, 1.2, 0.30),
            ("ppo", 4, 0, 0.40, 0.80, 10, 12, 0.20, 0.30, 0.8, 1.2, 0.30),
            ("ppo", 4, 1, 0.36, 0.80, 12, 12, 0.22, 0.32, 0.8, 1.2, 0.34),
            ("bapo", 4, 0, 0.44, 0.75, 10, 12, 0.10, 0.20, 0.70, 2.00, 0.40),
            ("bapo", 4, 1, 0.45, 0.75, 10, 12, 0.10, 0.20, 0.72, 2.10, 0.44),
            ("clip_0.8_1.5", 4, 0, 0.5, 0.7, 10, 12, 0.1, 0.10, 0.8, 1.5, 0.3),
        ]
    )
    c = claims_table(s).set_index("claim")
    row = c.filter(like="Negative tokens carry", axis=0).iloc[0]
    assert row["value"] == pytest.approx(1 - 0.38) and row["verdict"] == "held"
    # 0.60, 0.64: mean 0.62, half-width 12.706 * 0.0283 / sqrt 2 = 0.254 > 0.12.
    assert row["note"] == "95% interval includes the threshold"
    row = c.filter(like="Negative responses are longer", axis=0).iloc[0]
    assert row["value"] == pytest.approx(12 - 11) and row["verdict"] == "held"
    row = c.filter(like="clip fraction", axis=0).iloc[0]
    assert row["measured"] == "1x: 0.000, 4x: 0.210" and row["verdict"] == "held"
    row = c.filter(like="c_high settles", axis=0).iloc[0]
    assert row["value"] == pytest.approx(2.05) and row["verdict"] == "held"
    assert row["note"] == "95% interval reaches outside the range"  # 2.05 +- 0.635
    row = c.filter(like="positive contribution (bapo", axis=0).iloc[0]
    assert row["value"] == pytest.approx(0.445) and row["verdict"] == "held"
    row = c.filter(like="bapo beats ppo at 4x", axis=0).iloc[0]
    assert row["value"] == pytest.approx(0.42 - 0.32) and row["verdict"] == "held"
    assert c.filter(like="bapo beats ppo at 2x", axis=0).iloc[0]["verdict"] == "no data"
    assert c.filter(like="beats clip_higher", axis=0)["verdict"].eq("no data").all()
    row = c.filter(like="Raising c_high", axis=0).iloc[0]  # ppo 0.31 > 0.10: slower drop
    assert row["value"] == pytest.approx(0.21) and row["verdict"] == "held"
    assert c.filter(like="Lowering c_low", axis=0).iloc[0]["verdict"] == "no data"


def test_write_report(sweep, runset, tmp_path):
    summary = run_summary(runset)
    path, results, claims = write_report(
        runset, summary, tmp_path, ["runs"], ["fig02_x"], [("fig07_y", "no runs named z")], 5
    )
    text = path.read_text()
    assert path.name == "REPORT.md" and (tmp_path / "results.csv").exists()
    assert "| bapo | 4x |" in text and "- skipped `fig07_y`: no runs named z" in text
    assert set(claims["verdict"]) <= {"held", "not held", "no data"}
    # Every cell of the results table comes from the frame written next to it.
    mean = results.set_index(["method", "staleness", "metric"]).loc[("ppo", 2, "clip_frac")]
    assert f"{mean['mean']:.3f} ± {(mean['ci_high'] - mean['ci_low']) / 2:.3f} (n=2)" in text


def test_search_outcomes_counts_each_ending():
    from analysis.search_outcomes import outcome_table

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
    t = outcome_table(updates, {"r/bapo"}).set_index("updates")
    stale = t.loc["1..k-1 (stale)"]
    assert stale["n"] == 4
    assert (stale["at start"], stale["moved, reached"]) == (0.25, 0.25)
    assert (stale["not reached"], stale["undefined"]) == (0.25, 0.25)
    assert stale["rho before"] == pytest.approx((0.5 + 0.3 + 0.1) / 3)
    assert stale["c_high"] == pytest.approx((1.2 + 1.5 + 3.0 + 1.2) / 4)
    on = t.loc["0 (on-policy)"]
    assert on["n"] == 1 and on["at start"] == 1.0
    assert outcome_table(updates.drop(columns="bapo_steps"), {"r/bapo"}).empty
