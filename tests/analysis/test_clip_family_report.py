"""The clip family's report (analysis/clip_family_report.py) on synthetic runs: the claim rows
paired by seed as computed by hand from the numbers the test wrote, Holm's correction over
the 26 rows, sapo at token-mean labelled apart from sapo, the regime table over the steady
updates, and bad input named before any work."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis import clip_family_report

FAMILY = ("sapo", "dppo_tv", "gppo", "ce_gppo", "dcpo", "aspo")
REFERENCES = ("ppo", "clip_higher", "bapo")
CONTROL = "sapo (token-mean)"
EXPERIMENTS = ("ramble_4x", "ramble_delay_4")
SEEDS, REF_SEEDS = (0, 1, 2), (0, 1, 2, 3)  # the committed references have more seeds
DELAY = 2  # ramble_delay_4's queue here: its first 2 steps train on the warm start's rollouts
STEPS = 12
T975_DF2, T975_DF3 = 4.303, 3.182  # Student t's 97.5% quantiles (3 and 4 seeds)
# Final greedy accuracy by seed; seed 3 (references only) is far off, so a pairing that used
# it would show.
BAPO = {0: 0.30, 1: 0.34, 2: 0.27, 3: 0.90}
PPO = {0: 0.27, 1: 0.24, 2: 0.30, 3: 0.05}
# Three rows set apart: one far above bapo, one far below, one above ppo by 0.06 +- 0.01
# (p 0.009 alone, not after Holm over 26 rows).
GPPO_DELAY_OVER_BAPO = (0.100, 0.101, 0.102)
DCPO_4X_UNDER_BAPO = (-0.200, -0.201, -0.202)
ASPO_DELAY_OVER_PPO = (0.05, 0.06, 0.07)
CONTROL_UNDER_SAPO = (0.01, 0.03, -0.02)


def greedy(method: str, experiment: str, seed: int) -> float:
    """The final greedy accuracy this test writes for a run."""
    if method == "ppo":
        return PPO[seed]
    if method == "clip_higher":
        return PPO[seed] + 0.01
    if method == "gppo" and experiment == "ramble_delay_4":
        return BAPO[seed] + GPPO_DELAY_OVER_BAPO[seed]
    if method == "dcpo" and experiment == "ramble_4x":
        return BAPO[seed] + DCPO_4X_UNDER_BAPO[seed]
    if method == "aspo" and experiment == "ramble_delay_4":
        return PPO[seed] + ASPO_DELAY_OVER_PPO[seed]
    if method == CONTROL:
        return greedy("sapo", experiment, seed) - CONTROL_UNDER_SAPO[seed]
    if method not in FAMILY:  # bapo, and the methods the report leaves out
        return BAPO[seed]
    return BAPO[seed] + 0.01 * ((FAMILY.index(method) + seed) % 3) - 0.005


def _rewrite(path, greedy_acc: float, sampled_acc: float, delay: int) -> None:
    """Set the run's evals after step 0 (each a little apart, as evals are) and its update
    records' regime keys: a sapo run logs its gate's state and share; warm-up updates of a
    delay queue get numbers the steady ones never have, so their leaving out shows."""
    lines = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    sapo = "sapo" in path.parts
    for i, r in enumerate(lines):
        if r["kind"] == "eval" and r["step"] > 0:
            r["greedy_accuracy"], r["sampled_accuracy"] = greedy_acc + 0.002 * i, sampled_acc - 0.003 * i
        if r["kind"] == "update":
            warm = r["step"] < delay
            seed = int(path.name.removeprefix("seed"))
            r["clip_frac_pos"] = 0.5 if warm else 0.001 * (seed + 1)
            r["clip_frac_neg"] = 0.5 if warm else 0.002
            if sapo:
                r["gated_frac"] = 0.5 if warm else 0.0001 * (seed + 1)
                r["sapo_grad_pos_share"] = 0.1 if warm else 0.5
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def _write(root, write_run, method: str, experiment: str, seed: int, **kw):
    delay = DELAY if experiment == "ramble_delay_4" else 0
    config = {"offpolicy.source": "delay", "offpolicy.delay": DELAY} if delay else {}
    name, tag = ("sapo", "token-mean") if method == CONTROL else (method, kw.pop("tag", ""))
    config["method.aggregation"] = ("seq-mean-token-mean" if method == "sapo" else "token-mean")
    run = write_run(root, name, 4, seed, experiment=experiment, steps=STEPS, write_tokens=False,
                    extra_config={**config, **kw.pop("extra_config", {})}, tag=tag, **kw)
    acc = greedy(method, experiment, seed)
    _rewrite(run.path, acc, 0.2 + 0.5 * acc, delay)
    return run


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    from tests.analysis.conftest import write_run

    root = tmp_path_factory.mktemp("clip_family")
    runs = {}
    for experiment in EXPERIMENTS:
        for method in (*FAMILY, CONTROL):
            for seed in SEEDS:
                runs[(method, experiment, seed)] = _write(root / "family", write_run, method,
                                                          experiment, seed)
        for method in REFERENCES:
            for seed in REF_SEEDS:
                runs[(method, experiment, seed)] = _write(root / "refs", write_run, method,
                                                          experiment, seed)
        # left out: a method the rows do not name, an unfinished run of the family
        _write(root / "refs", write_run, "top_entropy", experiment, 0)
        _write(root / "family", write_run, "dppo_tv", experiment, 3, status="running")
    write_run(root / "refs", "ppo", 4, 0, experiment="ramble_2x", write_tokens=False)
    return root, runs


@pytest.fixture(scope="module")
def report(grid, tmp_path_factory):
    from analysis.claims import verdicts

    root, _ = grid
    out = tmp_path_factory.mktemp("clip_family_out")
    # The cells have 3 seeds, which make every row a pilot (test below); these tests check
    # the verdict and Holm rules on them, so the pilot threshold comes down to 3.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(verdicts, "PILOT_SEEDS", 3)
        assert clip_family_report.main(["--runs", str(root / "family"), str(root / "refs"),
                                        "--out", str(out)]) == 0
    return out, pd.read_csv(out / "claims.csv").set_index("key")


def test_three_seed_rows_are_pilots_outside_holms_tests(grid):
    from analysis.claims.clip_family import clip_family_claims
    from analysis.core.loader import load_runs
    from analysis.reports.clip_family import family_runs, family_summary

    root, _ = grid
    summary = family_summary(family_runs(load_runs([root / "family", root / "refs"]))[0])
    claims = clip_family_claims(summary)
    assert set(claims["verdict"]) == set(claims["holm_verdict"]) == {"pilot"}
    assert (claims["seeds"] == len(SEEDS)).all() and (claims["tests"] == 0).all()
    assert claims["p"].notna().all() and claims["holm_p"].isna().all()  # p kept, not tested


def _final(run, metric: str) -> float:
    """A run's final accuracy by hand: the mean of its last three evals after step 0."""
    lines = [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines()]
    return float(np.mean([r[metric] for r in lines if r["kind"] == "eval" and r["step"] > 0][-3:]))


def _paired(runs, a: str, b: str, experiment: str, metric: str) -> np.ndarray:
    return np.array([_final(runs[(a, experiment, s)], metric) - _final(runs[(b, experiment, s)], metric)
                     for s in SEEDS])


def _t_text(d: np.ndarray) -> str:
    return f"{d.mean():+.3f} ± {T975_DF2 * d.std(ddof=1) / math.sqrt(len(d)):.3f} (n=3;"


def _p_df2(d: np.ndarray) -> float:
    """The paired t-test's two-sided p at 2 degrees of freedom, in closed form:
    P(|T| > t) = 1 - t / sqrt(t^2 + 2)."""
    t = abs(d.mean()) / (d.std(ddof=1) / math.sqrt(len(d)))
    return 1.0 - t / math.sqrt(t * t + 2.0)


def _pairs():
    for e in EXPERIMENTS:
        for ref in ("bapo", "ppo"):
            for m in FAMILY:
                yield f"{m}_vs_{ref}_{e}", m, ref, e
        yield f"sapo_aggregation_{e}", "sapo", CONTROL, e


def test_every_row_is_the_paired_difference_by_hand(grid, report):
    _, runs = grid
    _, claims = report
    assert len(claims) == 26 and (claims["tests"] == 26).all()
    for key, a, b, e in _pairs():
        measured = claims.loc[key, "measured"]
        greedy_d = _paired(runs, a, b, e, "greedy_accuracy")
        sampled_d = _paired(runs, a, b, e, "sampled_accuracy")
        primary, _, other = measured.partition("; sampled: ")
        assert primary.startswith("greedy (primary): "), measured
        assert f"{a} {e} − {b} {e} {_t_text(greedy_d)}" in primary, (key, primary)
        assert _t_text(sampled_d) in other, (key, other)
        assert claims.loc[key, "p"] == pytest.approx(_p_df2(greedy_d), rel=1e-3), key
    # the references' four seeds are read (the unpaired interval), three of them paired
    assert "vs bapo ramble_4x" in claims.loc["sapo_vs_bapo_ramble_4x", "measured"]
    bapo_4x = np.array([_final(runs[("bapo", "ramble_4x", s)], "greedy_accuracy") for s in REF_SEEDS])
    assert (f"bapo ramble_4x {bapo_4x.mean():.3f} ± {T975_DF3 * bapo_4x.std(ddof=1) / 2:.3f} (n=4)"
            in claims.loc["sapo_vs_bapo_ramble_4x", "measured"])


def test_holm_over_the_table_unsettles_a_raw_verdict(report):
    _, claims = report
    p = claims["p"].to_numpy()
    order = np.argsort(p, kind="stable")
    adjusted, running = np.empty(len(p)), 0.0
    for rank, i in enumerate(order):  # Holm's step-down: (m - rank) p, never falling
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        adjusted[i] = running
    assert claims["holm_p"].to_numpy() == pytest.approx(adjusted)
    aspo = claims.loc["aspo_vs_ppo_ramble_delay_4"]
    assert aspo["p"] == pytest.approx(0.00915, abs=5e-5)  # 0.06 ± 0.01 over 3 seeds
    assert (aspo["verdict"], aspo["holm_verdict"]) == ("held", "not settled")
    assert aspo["holm_p"] > 0.05
    assert tuple(claims.loc["gppo_vs_bapo_ramble_delay_4", ["verdict", "holm_verdict"]]) == ("held", "held")
    assert tuple(claims.loc["dcpo_vs_bapo_ramble_4x", ["verdict", "holm_verdict"]]) == ("not held", "not held")
    report_text = (report[0] / "REPORT.md").read_text()
    assert "After Holm's correction over the 26 tested rows: 1 held, 1 not held, 24 not settled." in report_text


def test_sapo_at_token_mean_is_its_own_cell(grid, report):
    _, runs = grid
    out, claims = report
    acc = pd.read_csv(out / "accuracy.csv").set_index(["method", "experiment"])
    assert set(acc.index.get_level_values("method")) == {*REFERENCES, *FAMILY, CONTROL}
    assert set(acc.index.get_level_values("experiment")) == set(EXPERIMENTS)  # not ramble_2x
    for e in EXPERIMENTS:
        assert acc.loc[("sapo", e), "seeds"] == acc.loc[(CONTROL, e), "seeds"] == 3
        assert acc.loc[("ppo", e), "seeds"] == 4  # ppo at token-mean stays ppo
        assert acc.loc[("dppo_tv", e), "seeds"] == 3  # its unfinished seed 3 waits
        control = np.mean([_final(runs[(CONTROL, e, s)], "greedy_accuracy") for s in SEEDS])
        assert acc.loc[(CONTROL, e), "final greedy (primary)"].startswith(f"{control:.3f} ± ")
    assert list(acc.columns) == ["final greedy (primary)", "final sampled", "gain greedy", "seeds"]
    assert f"vs {CONTROL} ramble_4x" in claims.loc["sapo_aggregation_ramble_4x", "measured"]


def _steady_drift(run) -> float:
    """Mean entropy of the last 5 steady steps minus the first 5 (the queue's 2 left out)."""
    e = [s["entropy_mean"] for s in run.steps if s["step"] >= DELAY]
    return float(np.mean(e[-5:]) - np.mean(e[:5]))


def test_the_regime_reads_the_steady_updates(grid, report):
    _, runs = grid
    regime = pd.read_csv(report[0] / "regime.csv").set_index(["method", "experiment"])
    delay = ("sapo", "ramble_delay_4")
    # clip_frac_pos 0.1%, 0.2%, 0.3% by seed: mean 0.2%, half-width 4.303 x 0.1% / sqrt 3
    assert regime.loc[delay, "clipped A>0"] == "0.20% ± 0.25%"
    assert regime.loc[delay, "clipped A<0"] == "0.20%"  # every seed 0.2%: no interval
    assert regime.loc[delay, "gated"] == "0.02% ± 0.02%"
    assert regime.loc[delay, "pos share (as sapo's loss weighs)"] == "0.500"
    assert regime.loc[delay, "updates under rho0 0.4"] == "0.0%"  # sapo's own share, 0.5
    assert regime.loc[("ppo", "ramble_delay_4"), "gated"] == "—"  # ppo logs no gate
    ppo = np.array([_steady_drift(runs[("ppo", "ramble_delay_4", s)]) for s in REF_SEEDS])
    half = T975_DF3 * ppo.std(ddof=1) / 2  # 4 seeds: / sqrt(4)
    assert regime.loc[("ppo", "ramble_delay_4"), "entropy drift"] == f"{ppo.mean():.4f} ± {half:.4f}"
    vs = np.array([_steady_drift(runs[("gppo", "ramble_delay_4", s)]) for s in SEEDS]) - ppo[:3]
    assert regime.loc[("gppo", "ramble_delay_4"), "entropy drift − ppo (paired)"].startswith(
        f"{vs.mean():+.4f} ± {T975_DF2 * vs.std(ddof=1) / math.sqrt(3):.4f} (n=3;")


def test_the_forest_draws_the_rows_pairs_seed_by_seed(grid, report):
    from analysis.core.loader import load_runs
    from analysis.figures.clip_family import paired_rows
    from analysis.reports.clip_family import family_runs, family_summary

    root, _ = grid
    out, claims = report
    assert (out / "fig_clip_family_forest.png").stat().st_size > 10_000
    assert "- `fig_clip_family_forest`" in (out / "REPORT.md").read_text()
    summary = family_summary(family_runs(load_runs([root / "family", root / "refs"]))[0])
    drawn = paired_rows(summary, claims.reset_index()).set_index("key")
    assert list(drawn.index) == list(claims.index)  # one line per claim row, in its order
    gppo = drawn.loc["gppo_vs_bapo_ramble_delay_4"]
    assert gppo["pair"] == "gppo − bapo" and gppo["after_holm"] == "held"
    assert gppo["per_seed"] == pytest.approx(list(GPPO_DELAY_OVER_BAPO), abs=1e-4)
    control = drawn.loc["sapo_aggregation_ramble_4x"]
    assert control["pair"] == f"sapo − {CONTROL}"
    assert control["per_seed"] == pytest.approx(list(CONTROL_UNDER_SAPO), abs=1e-4)


def test_a_missing_folder_is_bad_input(grid, tmp_path, capsys):
    root, _ = grid
    with pytest.raises(SystemExit) as e:
        clip_family_report.main(["--runs", str(root / "refs"), str(root / "nowhere"),
                                 "--out", str(tmp_path / "out")])
    assert e.value.code == 2
    assert capsys.readouterr().err == f"config error: --runs: no such folder {root / 'nowhere'}\n"
    assert not (tmp_path / "out").exists()


def test_no_run_of_the_family_is_bad_input(grid, tmp_path, capsys):
    root, _ = grid
    with pytest.raises(SystemExit) as e:
        clip_family_report.main(["--runs", str(root / "refs"), "--out", str(tmp_path / "out")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("config error: --runs: no finished run of the clip family") and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_two_configs_in_one_cell_are_bad_input(grid, tmp_path, capsys, write_run):
    root, _ = grid
    for seed in SEEDS:  # a rho0 ablation beside bapo would add seeds to bapo's cell
        _write(tmp_path / "ablation", write_run, "bapo", "ramble_4x", seed,
               extra_config={"method.bapo.rho0": 0.3}, tag="rho0")
    with pytest.raises(SystemExit) as e:
        clip_family_report.main(["--runs", str(root / "family"), str(root / "refs"),
                                 str(tmp_path / "ablation"), "--out", str(tmp_path / "out")])
    assert e.value.code == 2
    assert "runs of two configs in one cell: bapo at ramble_4x" in capsys.readouterr().err


def _stamp(path, cpu_model: str) -> None:
    meta = json.loads((path / "meta.json").read_text())
    meta["numerics"] = {"isa": "AVX2", "mkl_branch": "AVX2", "cpu_model": cpu_model}
    (path / "meta.json").write_text(json.dumps(meta))


def test_references_pair_within_the_sweeps_cpu_family(grid, tmp_path):
    """The family made on Intel; bapo's 4x cells on Intel (0.1 above the fixture's) beside
    the fixture's unrecorded ones: the rows pair with the Intel cells and set the others apart;
    ppo, with no Intel cell, stays paired across families and the report says so; an int8
    run of bapo under a root is left out."""
    import shutil

    from tests.analysis.conftest import write_run

    root, runs = grid
    shutil.copytree(root / "family", tmp_path / "family")
    for meta in (tmp_path / "family").rglob("meta.json"):
        _stamp(meta.parent, "Intel(R) Xeon(R) Processor")
    intel = {}
    for seed in SEEDS:
        run = write_run(tmp_path / "intel", "bapo", 4, seed, experiment="ramble_4x", steps=STEPS,
                        write_tokens=False, extra_config={"method.aggregation": "token-mean"})
        _rewrite(run.path, BAPO[seed] + 0.1, 0.3, 0)
        _stamp(run.path, "Intel(R) Xeon(R) Processor")
        intel[seed] = run
    int8 = write_run(tmp_path / "intel", "bapo", 4, 0, experiment="ramble_4x", steps=STEPS,
                     write_tokens=False, tag="int8", extra_config={
                         "method.aggregation": "token-mean", "rollout.precision": "int8"})
    _stamp(int8.path, "Intel(R) Xeon(R) Processor")
    out = tmp_path / "out"
    assert clip_family_report.main(["--runs", str(tmp_path / "family"), str(tmp_path / "intel"),
                                    str(root / "refs"), "--out", str(out)]) == 0
    claims = pd.read_csv(out / "claims.csv").set_index("key")
    d = np.array([_final(runs[("sapo", "ramble_4x", s)], "greedy_accuracy")
                  - _final(intel[s], "greedy_accuracy") for s in SEEDS])
    assert f"{d.mean():+.3f} ± {T975_DF2 * d.std(ddof=1) / math.sqrt(3):.3f}" in claims.loc[
        "sapo_vs_bapo_ramble_4x", "measured"]
    report = (out / "REPORT.md").read_text()
    assert "Set apart: 4 reference runs of the same cells made on unrecorded" in report
    assert "their pairs cross families" in report  # ppo has no Intel cell
    acc = pd.read_csv(out / "accuracy.csv")
    bapo_4x = acc[(acc["method"] == "bapo") & (acc["experiment"] == "ramble_4x")]
    assert bapo_4x["seeds"].tolist() == [3]  # the Intel cells alone, not the int8 run


def test_references_that_do_not_learn_are_named_before_the_rows():
    from analysis.reports.clip_family import not_learning_lines

    # bapo at 4x: gains 0.10, -0.02, 0.04 (mean 0.04, sd 0.06, t(2) half-width 0.149: reaches
    # 0); ppo at 4x: 0.10, 0.11, 0.12 (half-width 0.025: learns); bapo at the lag: one seed.
    s = pd.DataFrame({"method": ["bapo"] * 3 + ["ppo"] * 3 + ["bapo"],
                      "experiment": ["ramble_4x"] * 6 + ["ramble_delay_4"],
                      "gain_greedy_acc": [0.10, -0.02, 0.04, 0.10, 0.11, 0.12, -0.5]})
    text = "".join(not_learning_lines(s))
    assert "bapo at ramble_4x 0.040 ± 0.149 (n=3)" in text
    assert "ppo at" not in text and "ramble_delay_4" not in text
    assert not_learning_lines(s[s["method"] == "ppo"]) == []
