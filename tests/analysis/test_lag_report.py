"""The lag report: lags from configs, the steady part, one warm start, ratio shares, paired
rows and claim verdicts, each checked on numbers worked out by hand."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from analysis.claims.lag import lag_claims
from analysis.claims.rules import VERDICTS
from analysis.core.builds import check_one_warm_start
from analysis.core.lags import lag_table, steady_updates
from analysis.core.loader import load_runs
from analysis.figures.lag_forest import paired_rows
from analysis.figures.lag_ratios import outside_clip, ratio_shares
from analysis.lag_report import main as lag_report_main
from analysis.reports.lag import task_label
from tests.conftest import config_error

T975_2 = 4.302652729911275  # Student t, 97.5%, 2 degrees of freedom (3 seeds)


def _delayed(write_run, root, method, seed, delay, warm="ws1", steps=6, staleness=4,
             weights=None):
    cfg = {"offpolicy.source": "delay", "offpolicy.delay": delay, "offpolicy.anchor": "coupled"}
    run = write_run(root, method, staleness, seed, experiment=f"delay{delay}", steps=steps,
                    extra_config=cfg if delay else {"offpolicy.source": "fresh"})
    meta = json.loads((run.path / "meta.json").read_text())
    meta["warm_start"] = f".cache/warm_start/{warm}"
    if weights:
        meta["warm_start_weights"] = weights
    (run.path / "meta.json").write_text(json.dumps(meta))
    return run


def test_lag_ranges_come_from_the_config(tmp_path, write_run):
    _delayed(write_run, tmp_path, "ppo", 0, 0)
    _delayed(write_run, tmp_path, "ppo", 0, 4)
    write_run(tmp_path, "ppo", 4, 0, experiment="replay",
              extra_config={"offpolicy.source": "replay"})
    delay = {"offpolicy.source": "delay", "offpolicy.delay": 1}
    write_run(tmp_path, "ppo", 4, 0, experiment="epochs2",
              extra_config={**delay, "train.epochs": 2})
    write_run(tmp_path, "ppo", 4, 0, experiment="epochs_mode",
              extra_config={**delay, "train.staleness_mode": "epochs", "train.epochs": 3})
    t = lag_table(load_runs([tmp_path])).set_index("experiment")
    assert t.loc["delay0", "lag"] == "0-3"  # fresh at 4 updates a step
    assert t.loc["delay4", "lag"] == "16-19"  # 4 steps x 4 updates, + 0..3
    assert t.loc["delay4", "warmup_steps"] == 4
    assert t.loc["epochs2", "lag"] == "8-15"  # 2 passes x 4 mini-batches: 8 updates a step
    assert t.loc["epochs_mode", "lag"] == "4-7"  # k = 4 full-batch updates; train.epochs unused
    # replay mixes ages: the measured mean lag (the synthetic updates log j = 0..3)
    assert t.loc["replay", "lag"] == "~2 (replay)"
    assert t.loc["replay", "lag_low"] == pytest.approx(1.5)


def test_seeds_of_one_replay_cell_share_one_measured_lag(tmp_path, write_run):
    # seed 0 logs lags 0..3 (mean 1.5, alone "~2"), seed 1 lags 0..1 (mean 0.5, alone "~0");
    # pooled over the cell's updates: (0+1+2+3 + 0+1) / 6 = 7/6, one label for both seeds
    for seed, staleness in ((0, 4), (1, 2)):
        write_run(tmp_path, "ppo", staleness, seed, experiment="replay",
                  extra_config={"offpolicy.source": "replay"})
    t = lag_table(load_runs([tmp_path]))
    assert list(t["lag"]) == ["~1 (replay)", "~1 (replay)"]
    assert t["lag_low"].tolist() == pytest.approx([7 / 6, 7 / 6])


def test_bapo_search_table_labels_a_replay_cell_as_the_cell_tables_do(tmp_path, write_run):
    # bapo alone logs lags 0..3 (~2), ppo 0..1; pooled the cell is 7/6 (~1) in every table
    for method, staleness in (("bapo", 4), ("ppo", 2)):
        write_run(tmp_path / "runs", method, staleness, 0, experiment="replay",
                  extra_config={"offpolicy.source": "replay"})
    out = tmp_path / "out"
    assert lag_report_main(["--runs", str(tmp_path / "runs"), "--pilots", "none",
                            "--out", str(out)]) == 0
    assert set(pd.read_csv(out / "lag_summary.csv")["lag"]) == {"~1 (replay)"}
    assert set(pd.read_csv(out / "lag_search.csv")["lag"]) == {"~1 (replay)"}


def test_steady_updates_leave_out_the_delay_warmup(tmp_path, write_run):
    _delayed(write_run, tmp_path, "ppo", 0, 2, steps=5)
    u = steady_updates(load_runs([tmp_path]))
    assert sorted(u["step"].unique()) == [2, 3, 4]  # steps 0, 1 train on initial data
    assert set(u["lag"]) == {"8-11"}


def test_runs_of_two_warm_starts_are_refused_by_name(tmp_path, write_run):
    _delayed(write_run, tmp_path, "ppo", 0, 1, warm="aaa")
    _delayed(write_run, tmp_path, "bapo", 0, 1, warm="bbb")
    runs = load_runs([tmp_path])
    with pytest.raises(ValueError, match="2 warm starts.*aaa.*bbb"):
        check_one_warm_start(runs)
    # no weights digest: the build is the key and the greedy accuracy at step 0 (0.40 in
    # every synthetic run)
    assert check_one_warm_start(runs.subset(lambda r: r.method == "ppo")) == \
        "aaa (no weights digest; greedy 0.4000 at step 0)"


def _set_step0_greedy(run, greedy: float) -> None:
    lines = [json.loads(x) for x in (run.path / "metrics.jsonl").read_text().splitlines()]
    for rec in lines:
        if rec["kind"] == "eval" and rec["step"] == 0:
            rec["greedy_accuracy"] = greedy
    (run.path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def test_one_key_without_digests_is_told_apart_by_the_step0_accuracy(tmp_path, write_run):
    # the reproduction's root and the first lag root: key 5fb97ee7a8113be3 for both, no
    # digest, greedy 0.465 and 0.398 at step 0. The key alone would call them one build.
    a = _delayed(write_run, tmp_path, "ppo", 0, 1, warm="5fb97ee7a8113be3")
    b = _delayed(write_run, tmp_path, "bapo", 0, 1, warm="5fb97ee7a8113be3")
    _set_step0_greedy(a, 0.465)
    _set_step0_greedy(b, 0.398)
    with pytest.raises(ValueError, match=r"2 warm starts.*greedy 0\.3980 at step 0.*"
                                         r"greedy 0\.4650 at step 0"):
        check_one_warm_start(load_runs([tmp_path]))


def test_a_run_with_neither_digest_nor_step0_eval_is_refused_by_name(tmp_path, write_run):
    run = _delayed(write_run, tmp_path, "ppo", 0, 1)
    lines = [x for x in (run.path / "metrics.jsonl").read_text().splitlines()
             if not ('"kind": "eval"' in x and '"step": 0,' in x)]
    (run.path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="no warm-start weights digest and no step-0 eval.*ppo"):
        check_one_warm_start(load_runs([tmp_path]))


def test_one_key_built_on_two_machines_is_two_warm_starts(tmp_path, write_run):
    # the key names the build's inputs; the weights digest tells two CPUs' builds apart
    _delayed(write_run, tmp_path, "ppo", 0, 1, warm="key", weights="d1")
    _delayed(write_run, tmp_path, "bapo", 0, 1, warm="key", weights="d2")
    runs = load_runs([tmp_path])
    with pytest.raises(ValueError, match=r"2 warm starts.*key \(weights d1\).*key \(weights d2\)"):
        check_one_warm_start(runs)


def test_pilots_of_another_build_are_left_out_of_the_report(tmp_path, write_run):
    for seed in range(2):
        _delayed(write_run, tmp_path / "runs", "ppo", seed, 1, weights="d1")
    _delayed(write_run, tmp_path / "pilots", "ppo", 0, 4, weights="d2")
    out = tmp_path / "out"
    assert lag_report_main(["--runs", str(tmp_path / "runs"), "--pilots",
                            str(tmp_path / "pilots"), "--out", str(out)]) == 0
    s = pd.read_csv(out / "lag_summary.csv")
    assert set(s["lag"]) == {"4-7"}  # the pilot at 16-19 (another build) is not in it
    assert "16-19" not in (out / "REPORT.md").read_text()


def _with_histograms(run) -> None:
    """Give every update record ratio histograms (8 bins) as the trainer logs them."""
    recs = [json.loads(x) for x in (run.path / "metrics.jsonl").read_text().splitlines()]
    for r in recs:
        if r["kind"] == "update":
            r["ratio_hist_pos"], r["ratio_hist_neg"] = [0, 1, 2, 40, 40, 2, 1, 0], [0, 2, 3, 40, 40, 1, 0, 0]
    (run.path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_a_pilot_of_the_same_build_gets_a_figure_of_its_own_never_the_sweeps(tmp_path,
                                                                             write_run):
    for seed in range(2):
        _with_histograms(_delayed(write_run, tmp_path / "runs", "ppo", seed, 1, weights="d1"))
    _with_histograms(_delayed(write_run, tmp_path / "pilots", "ppo", 0, 4, weights="d1"))
    out = tmp_path / "out"
    assert lag_report_main(["--runs", str(tmp_path / "runs"), "--pilots",
                            str(tmp_path / "pilots"), "--out", str(out)]) == 0
    assert set(pd.read_csv(out / "lag_summary.csv")["lag"]) == {"4-7"}
    text = (out / "REPORT.md").read_text()
    sweeps, pilots = text.split("## One-seed calibration pilots, apart from the sweeps")
    assert "16-19" not in sweeps and "![lag_pilot_ratios](lag_pilot_ratios.png)" in pilots
    assert (out / "lag_pilot_ratios.png").stat().st_size > 0


def test_a_one_seed_cell_beside_multi_seed_cells_is_listed_apart(tmp_path, write_run):
    for seed in range(3):
        _delayed(write_run, tmp_path / "runs", "ppo", seed, 1)
    _delayed(write_run, tmp_path / "runs", "ppo", 0, 4)  # lag 16-19, one seed
    out = tmp_path / "out"
    assert lag_report_main(["--runs", str(tmp_path / "runs"), "--out", str(out)]) == 0
    text = (out / "REPORT.md").read_text()
    sweeps, apart = text.split("## One-seed cells, apart from the sweeps")
    assert "16-19" not in sweeps and "| 16-19 | coupled | ppo | 1 |" in apart
    s = pd.read_csv(out / "lag_summary.csv")
    assert s.loc[s["lag"] == "16-19", "apart_from_sweeps"].all()
    assert not s.loc[s["lag"] == "4-7", "apart_from_sweeps"].any()


def test_report_of_bapo_alone_skips_the_ppo_figures(tmp_path, write_run):
    # a root without ppo runs (a one-method pilot) still gets its report
    _delayed(write_run, tmp_path / "runs", "bapo", 0, 1)
    out = tmp_path / "out"
    assert lag_report_main(["--runs", str(tmp_path / "runs"), "--pilots", "none",
                            "--out", str(out)]) == 0
    text = (out / "REPORT.md").read_text()
    assert "skipped: no ratio histograms" in text and (out / "lag_summary.csv").is_file()


def test_ratio_shares_sum_histograms_then_normalise():
    updates = pd.DataFrame({
        "lag": ["16-19", "16-19"], "lag_low": [16, 16],
        "ratio_hist_pos": [[1, 0, 0, 5, 3, 0, 0, 1], [0, 0, 0, 0, 0, 0, 0, 0]],
        "ratio_hist_neg": [[0, 0, 2, 4, 4, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0]],
    })
    shares = ratio_shares(updates)
    pos = shares[shares["sign"] == "A > 0"].set_index("bin")["share"]
    assert pos["0.8-1"] == pytest.approx(0.5)
    assert pos[">2"] == pytest.approx(0.1)
    off = outside_clip(shares)
    assert off[("16-19", "A > 0")] == pytest.approx(0.2)  # (1 + 1) of 10 outside [0.8, 1.2]
    assert off[("16-19", "A < 0")] == pytest.approx(0.2)  # 2 of 10, all in 0.5-0.8


def _summary(diffs, base=(0.30, 0.35, 0.40)):
    rows = []
    for seed, (b, d) in enumerate(zip(base, diffs, strict=True)):
        for method, acc in (("ppo", b), ("bapo", b + d), ("clip_higher", b)):
            rows.append({"method": method, "seed": seed, "lag": "16-19", "lag_low": 16,
                         "anchor": "coupled", "source": "delay", "experiment": "delay_16",
                         "final_greedy_acc": acc, "final_sampled_acc": acc,
                         "entropy_drift": -0.01 if method == "ppo" else 0.0})
    return pd.DataFrame(rows)


def test_paired_rows_are_per_seed_differences_with_a_t_interval():
    diffs = (0.10, 0.12, 0.11)
    d = paired_rows(_summary(diffs))
    row = d[(d["method"] == "bapo") & (d["metric"] == "final_greedy_acc")].iloc[0]
    sd = np.std(diffs, ddof=1)
    assert row["mean"] == pytest.approx(0.11)
    # the t table has 3 decimals (4.303)
    assert row["high"] - row["mean"] == pytest.approx(T975_2 * sd / np.sqrt(3), rel=2e-4)
    assert row["per_seed"] == pytest.approx(list(diffs))
    # its paired t-test: t = 0.11 / (0.01 / sqrt 3) = 19.05 on 2 df; P(|T| > t) = 1 - t /
    # sqrt(t^2 + 2) for 2 df (closed form): 0.00274
    t = 0.11 / (sd / np.sqrt(3))
    assert row["p"] == pytest.approx(1 - t / np.sqrt(t * t + 2), rel=1e-6)
    # Holm over the table's rows: bapo's three rows and clip_higher's (whose accuracy rows
    # are exactly 0 on every seed: no spread, no test); the entropy rows differ by a constant
    # +0.01: no spread either. One tested row: its adjusted p is its own.
    assert d["p"].notna().sum() == 2 and row["holm_p"] == pytest.approx(2 * row["p"])


def test_paired_rows_name_a_gradient_clipping_gap():
    s = _summary((0.10, 0.12, 0.11)).assign(steady_grad_clipped=0.10)
    s.loc[s["method"] == "bapo", "steady_grad_clipped"] = 0.02
    d = paired_rows(s).set_index(["method", "metric"])
    assert d.loc[("bapo", "final_greedy_acc"), "note"] == (
        "confound: gradient-norm clipping binds on 2% (bapo) vs 10% (ppo) of updates")
    assert d.loc[("clip_higher", "final_greedy_acc"), "note"] == ""


def test_claim_verdicts_follow_the_paired_interval():
    held = lag_claims(_summary((0.10, 0.12, 0.11)), pd.DataFrame()).set_index("claim")
    assert held.loc["bapo beats ppo at lag 16-19", "verdict"] == "held"
    # clip_higher's entropy drift is 0.0 against ppo's -0.01 on every seed: a constant
    # +0.01 difference has no spread, so no interval: not settled, and said so
    entropy = "raising c_high slows the entropy drop (clip_higher vs ppo, lag 16-19)"
    assert held.loc[entropy, "verdict"] == "not settled"
    assert "every seed equal: no interval" in held.loc[entropy, "note"]
    assert "± 0.000" not in held.loc[entropy, "measured"]
    worse = lag_claims(_summary((-0.10, -0.12, -0.11)), pd.DataFrame()).set_index("claim")
    assert worse.loc["bapo beats ppo at lag 16-19", "verdict"] == "not held"
    mixed = lag_claims(_summary((0.10, -0.12, 0.01)), pd.DataFrame()).set_index("claim")
    assert mixed.loc["bapo beats ppo at lag 16-19", "verdict"] == "not settled"
    # sweeps not run: rows say so instead of vanishing
    assert held.loc["decoupled beats naive (coupled) ppo at lag 16-19", "verdict"] == "no data"
    assert "corrections" in held.loc["decoupled beats naive (coupled) ppo at lag 16-19", "note"]
    assert held.loc["m2po at the largest lag matches on-policy ppo", "verdict"] == "no data"


def test_missing_cells_name_the_sweep_that_would_run_them():
    s = _summary((0.1, 0.1, 0.1)).assign(lag="256-259", lag_low=256, experiment="delay_256")
    c = lag_claims(s[s["method"] != "clip_higher"], pd.DataFrame()).set_index("claim")
    # large_lag_peers runs bapo and cispo: no sweep has clip_higher at 256-259
    note = c.loc["bapo beats clip_higher at lag 256-259", "note"]
    assert "no sweep runs clip_higher" in note
    assert c.loc["bapo beats clip_higher at lag 256-259", "verdict"] == "no data"
    assert "sweep `corrections`" in c.loc["decoupled beats naive (coupled) ppo at lag 256-259",
                                          "note"]


def test_m2po_row_pairs_the_largest_lag_with_on_policy_ppo():
    # on-policy ppo 0.48, 0.47, 0.46; m2po at 256-259 0.44, 0.10, 0.45: per seed -0.04,
    # -0.37, -0.01 (two within the 0.05 margin), mean -0.14, an interval reaching past -0.05
    rows = [{"method": "ppo", "seed": s, "lag": "0", "lag_low": 0, "anchor": "coupled",
             "source": "fresh", "experiment": "staleness_1x", "final_greedy_acc": a}
            for s, a in enumerate((0.48, 0.47, 0.46))]
    rows += [{"method": "m2po", "seed": s, "lag": "256-259", "lag_low": 256,
              "anchor": "coupled", "source": "delay", "experiment": "delay_256",
              "final_greedy_acc": a} for s, a in enumerate((0.44, 0.10, 0.45))]
    row = lag_claims(pd.DataFrame(rows), pd.DataFrame()).set_index("claim").loc[
        "m2po at the largest lag matches on-policy ppo (lag 256-259)"]
    assert row["value"] == pytest.approx(-0.14)
    assert row["verdict"] == "not settled"
    assert "m2po @ 256-259 0.330" in row["measured"] and "ppo @ 0 0.470" in row["measured"]
    assert "2 of 3 seeds within 0.05" in row["measured"]


def test_replay_and_partial_cells_get_a_bapo_vs_ppo_row():
    # bapo 0.15, 0.16, 0.14 below ppo: the paired interval lies below 0, so "not held"
    s = _summary((-0.15, -0.16, -0.14)).assign(lag="~13 (replay)", lag_low=13.0,
                                               source="replay", experiment="replay")
    c = lag_claims(s, pd.DataFrame()).set_index("claim")
    row = c.loc["bapo beats ppo under ~13 (replay)"]
    assert row["value"] == pytest.approx(-0.15)
    assert row["verdict"] == "not held"
    assert not c.index.str.contains("at lag ~13").any()  # no delay-queue rows for it


def _searched(outcomes: list[tuple[str, bool]], rho0: float = 0.4) -> pd.DataFrame:
    """Annotated bapo update records at lag 16-19: (outcome, bounds at the grid's end)."""
    rho = {"at start": 0.45, "moved, reached": 0.41, "not reached": 0.30}
    return pd.DataFrame([{"method": "bapo", "lag": "16-19", "seed": i % 3, "run_id": f"r{i % 3}",
                          "experiment": "delay_16", "outcome": o, "at_grid_end": end,
                          "ceiling_readable": True, "rho": rho[o], "rho0": rho0}
                         for i, (o, end) in enumerate(outcomes)])


def test_search_claim_compares_the_reach_rate_with_its_ceiling():
    from analysis.core.stats import Z975

    # 10 updates: 6 at start; of the 4 below rho0, 1 reached and 3 ended at the grid's end
    # below rho0 (no bounds reach it): ceiling 1 of 4, reached 1 of 4 -> held
    ok = [("at start", False)] * 6 + [("moved, reached", False)] + [("not reached", True)] * 3
    name = "bapo's search reaches rho0 = 0.4 whenever its grid can (lag 16-19)"
    row = lag_claims(_summary((0, 0, 0)), _searched(ok)).set_index("claim").loc[name]
    assert row["verdict"] == "held" and row["value"] == pytest.approx(0.25)
    # Wilson 95% of 4 of 10, by its formula: centre (p + z^2/2n) / (1 + z^2/n), half-width
    # z / (1 + z^2/n) * sqrt(p(1-p)/n + z^2/4n^2)
    z, n, p = Z975, 10, 0.4
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert (f"start below rho0: 0.400 [{centre - half:.3f}, {centre + half:.3f}] "
            "(4 of 10; Wilson, pooled updates)") in row["measured"]
    assert "ceiling): 0.250" in row["measured"] and "reached it: 0.250" in row["measured"]
    assert "ends at rho >= rho0 in 7 of 10 updates" in row["note"]
    assert np.isnan(row["p"])  # a count, not a test: Holm does not count it
    # one "not reached" that stopped before the grid's end: reachable for all we know, and
    # the search gave up early -> the reached share falls short of the ceiling
    short = ok[:-1] + [("not reached", False)]
    row = lag_claims(_summary((0, 0, 0)), _searched(short)).set_index("claim").loc[name]
    assert row["verdict"] == "not held"
    assert "ceiling): 0.500" in row["measured"] and "1 stopped short" in row["note"]
    # nothing below rho0: nothing to reach
    row = lag_claims(_summary((0, 0, 0)), _searched([("at start", False)] * 3)).set_index(
        "claim").loc[name]
    assert row["verdict"] == "not settled" and "no update started below rho0" in row["note"]


def test_report_cli_writes_claims_tables_and_figures(tmp_path, write_run):
    root = tmp_path / "runs"
    for seed in (0, 1, 2):
        for method in ("ppo", "clip_higher", "bapo"):
            _delayed(write_run, root, method, seed, 2)
    out = tmp_path / "out"
    assert lag_report_main(["--runs", str(root), "--pilots", "none", "--out", str(out)]) == 0
    text = (out / "REPORT.md").read_text()
    assert "bapo beats ppo at lag 8-11, ppo clips " in text
    claims = pd.read_csv(out / "lag_claims.csv")
    assert set(claims["verdict"]) <= set(VERDICTS)
    for name in ("lag_training", "lag_forest", "lag_bapo"):
        assert (out / f"{name}.png").stat().st_size > 0
    search = pd.read_csv(out / "lag_search.csv").set_index("method")
    # the synthetic bapo search: updates j = 0, 1 at start, 2 moved, 3 not reached
    assert search.loc["bapo", "at start"] == pytest.approx(0.5)
    assert search.loc["bapo", "moved, reached"] == pytest.approx(0.25)
    assert search.loc["bapo", "not reached"] == pytest.approx(0.25)
    # lag_bapo's reach panel: of the updates below rho0 (j = 2, 3), the search reached j = 2;
    # the synthetic config names no grid steps, so the ceiling cannot be read (NaN)
    n = search.loc["bapo", "updates"]
    assert search.loc["bapo", ["below_n", "reached_n"]].tolist() == [n / 2, n / 4]
    assert np.isnan(search.loc["bapo", "ceiling_n"]) and not search.loc["bapo", "ceiling_readable"]


def test_lag_training_draws_a_line_per_lag_and_says_when_there_is_one(tmp_path, write_run):
    from analysis.core.lags import coupled_with_lag
    from analysis.figures.contract import Options
    from analysis.figures.lag_training import fig_lag_training

    for delay in (1, 4):
        _delayed(write_run, tmp_path / "runs", "ppo", 0, delay)
    runs = load_runs([tmp_path / "runs"])
    steps, lags = coupled_with_lag(runs, "ppo")
    res = fig_lag_training(steps, lags, Options(out=tmp_path, formats=("png",), dpi=30))
    assert set(res.data["lag"]) == {"4-7", "16-19"}  # one line per lag, every metric
    # x in optimizer updates: 4 a step at 4x, the end of step s at (s + 1) * 4; a delay of 4
    # steps trains on the initial weights' rollouts up to update 16 (dotted there)
    late = res.data[(res.data["lag"] == "16-19") & (res.data["metric"] == "reward_mean")]
    assert sorted(late["updates"]) == [4 * (s + 1) for s in range(6)]
    assert late.set_index("updates")["warm_up"].to_dict() == {u: u <= 16 for u in late["updates"]}
    assert res.extra["title"]["title"].iat[0].startswith("ppo's training by lag (2 lags)")
    one = lags[lags["lag"] == "4-7"]
    res = fig_lag_training(steps[steps["run_id"].isin(one["run_id"])], one,
                           Options(out=tmp_path, formats=("png",), dpi=30))
    assert res.extra["title"]["title"].iat[0].startswith("ppo's training at lag 4-7 (the one lag")


def test_report_cli_names_a_missing_runs_folder(tmp_path, capsys):
    line = config_error(capsys, lambda: lag_report_main(
        ["--runs", str(tmp_path / "nope"), "--pilots", "none", "--out", str(tmp_path / "out")]))
    assert line == f"--runs: no such folder: {tmp_path / 'nope'}"


def test_report_cli_exits_2_naming_a_root_without_usable_runs(tmp_path, write_run, capsys):
    write_run(tmp_path / "runs", "ppo", 4, 0, status="running")  # unfinished: left out
    line = config_error(capsys, lambda: lag_report_main(
        ["--runs", str(tmp_path / "runs"), "--pilots", "none", "--out", str(tmp_path / "out")]))
    assert line.startswith("no usable runs under the given roots (")
    assert line.endswith("pass --runs the folders that hold the lag sweeps' finished runs "
                         "(default experiments/lag_results)")
    assert not (tmp_path / "out" / "REPORT.md").exists()


def test_report_cli_exits_2_on_runs_of_two_warm_starts(tmp_path, write_run, capsys):
    _delayed(write_run, tmp_path / "runs", "ppo", 0, 1, warm="aaa")
    _delayed(write_run, tmp_path / "runs", "bapo", 0, 1, warm="bbb")
    line = config_error(capsys, lambda: lag_report_main(
        ["--runs", str(tmp_path / "runs"), "--pilots", "none", "--out", str(tmp_path / "out")]))
    assert line.startswith("lag report: the runs come from 2 warm starts (aaa")


def test_corrections_table_is_per_lag_and_anchor_over_seeds(tmp_path):
    from analysis.figures.contract import Options
    from analysis.figures.lag_corrections import corrections_table, fig_lag_corrections

    rows = [{"method": "ppo", "source": "delay", "lag": lag, "lag_low": low, "anchor": a,
             "seed": s, "final_greedy_acc": base + 0.01 * s}
            for lag, low in (("4-7", 4), ("16-19", 16))
            for a, base in (("coupled", 0.30), ("decoupled", 0.36))
            for s in (0, 1, 2)]
    t = corrections_table(pd.DataFrame(rows)).set_index(["lag", "anchor"])
    assert t.loc[("16-19", "decoupled"), "mean"] == pytest.approx(0.37)  # 0.36, 0.37, 0.38
    assert t.loc[("16-19", "decoupled"), "high"] - 0.37 == pytest.approx(4.303 * 0.01 / np.sqrt(3))
    fig = fig_lag_corrections(pd.DataFrame(rows), Options(out=tmp_path, formats=("png",)), 0.4)
    assert (tmp_path / "lag_corrections.png").stat().st_size > 0
    assert len(fig.data) == 4


def test_positive_share_by_lag_counts_updates_below_rho0():
    from analysis.reports.lag_sections import positive_share_by_lag

    u = pd.DataFrame({"lag": ["0-3"] * 4 + ["16-19"] * 2, "run_id": ["a", "a", "b", "b", "c", "c"],
                      "rho": [0.3, 0.5, 0.45, 0.39, 0.6, None]})
    t = positive_share_by_lag(u)
    assert t.loc["0-3", "rho < 0.4"] == pytest.approx(0.5)  # 0.3 and 0.39 of 4
    assert t.loc["0-3", "mean rho"] == pytest.approx(0.41)
    assert t.loc["0-3", "runs"] == 2
    assert t.loc["16-19", "mean rho"] == pytest.approx(0.6)  # a missing rho is not a value


def test_lag_order_puts_the_narrower_lag_first_on_a_tie():
    from analysis.figures.lag_common import lag_order

    labels = pd.Series(["16-19", "0-3", "0", "4-7", "0-3"])
    assert lag_order(labels, pd.Series([16, 0, 0, 4, 0])) == ["0", "0-3", "4-7", "16-19"]


def test_a_variant_is_paired_with_its_method_and_with_ppo_at_its_lag():
    from analysis.reports.lag_variants import variant_table

    s = _summary((-0.15, -0.16, -0.14))  # bapo 0.15 below ppo on every seed
    # a bapo variant 0.10 above bapo (0.05 below ppo) on every seed, at the same lag
    var = s[s["method"] == "bapo"].assign(method="bapo (bapo.low_start=0.8)")
    var["final_greedy_acc"] += 0.10
    s = pd.concat([s, var], ignore_index=True)
    base = {"bapo (bapo.low_start=0.8)": "bapo", "bapo": "bapo", "ppo": "ppo"}
    t = variant_table(s, base)
    assert list(t["variant"].unique()) == ["bapo (bapo.low_start=0.8)"]  # bapo is no variant
    row = t[t["metric"] == "final greedy"].iloc[0]
    assert row["method"] == "bapo" and row["lag"] == "16-19"
    assert row["variant mean"] == pytest.approx(0.35 - 0.15 + 0.10, abs=1e-4)
    assert row["method mean"] == pytest.approx(0.35 - 0.15, abs=1e-4)
    assert row["ppo mean"] == pytest.approx(0.35)
    # a constant +0.10 and -0.05 minus the seed spread, paired
    # a constant difference is no interval: said so, never "± 0.000"
    assert row["variant − method"] == "+0.100 (n=3; 3 of 3 seeds > 0; every seed equal: no interval)"
    sd = np.std([-0.05, -0.06, -0.04], ddof=1)
    assert row["variant − ppo"] == (
        f"-0.050 ± {T975_2 * sd / np.sqrt(3):.3f} (n=3; 0 of 3 seeds > 0)")
    # no variant: an empty table, so the report leaves the section out
    assert variant_table(_summary((0.1, 0.1, 0.1)), {"bapo": "bapo", "ppo": "ppo"}).empty


def test_task_label_names_the_params_a_run_changes_from_the_task_yaml():
    # conf/task/guess_check.yaml sets max_value 20 and has no ramble_fraction
    ramble = {"name": "guess_check", "params": {"max_value": 20, "ramble_fraction": 0.3}}
    assert task_label(ramble) == "`guess_check` (ramble_fraction 0.3)"
    assert task_label({"name": "guess_check", "params": {"max_value": 20}}) == "`guess_check`"
    assert task_label({"name": "guess_check", "params": {"max_value": 30}}) == "`guess_check` (max_value 30)"
    assert task_label({}) == "`arithmetic`"


def test_every_lag_quantity_is_over_the_steady_steps(tmp_path, write_run):
    from analysis.core.lags import lag_summary

    # a delay of 2 steps: steps 0 and 1 train on the initial weights' rollouts
    run = _delayed(write_run, tmp_path, "ppo", 0, 2, steps=12)
    s = lag_summary(load_runs([tmp_path])).iloc[0]
    steps = pd.DataFrame(run.steps)
    steady = steps[steps["step"] >= 2]
    e = steady["entropy_mean"]
    assert s["entropy_drift"] == pytest.approx(e.tail(5).mean() - e.head(5).mean())
    assert s["length_neg"] == pytest.approx(steady["response_length_neg"].mean())
    whole = steps["entropy_mean"]  # what it was before: the warm-up's steps in the first window
    assert s["entropy_drift"] != pytest.approx(whole.tail(5).mean() - whole.head(5).mean())


def test_final_evals_off_the_eval_grid_are_named():
    from analysis.reports.lag_sections import _spacing_lines, equally_spaced

    assert equally_spaced("80/100/120") and equally_spaced("10/20") and not equally_spaced("40/45/46")
    s = pd.DataFrame({"lag": ["64-67", "64-67", "0"], "final_eval_steps": ["40/45/46"] * 2 + ["80/100/120"]})
    (line, _) = _spacing_lines(s)
    assert line.startswith("Final evals not equally spaced: lag 64-67 (steps 40/45/46). ")
    assert _spacing_lines(s[s["lag"] == "0"]) == []
