"""The mismatch report (analysis/mismatch_report.py) on synthetic runs: settings from the
configs, the claim rows paired by seed as computed by hand, only the methods that ran with a
low-precision sampler, and bad input named before any work."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from analysis import mismatch_report
from analysis.core.stats import t975

SEEDS = (0, 1, 2)
SETTINGS = {"int8/none": {"rollout.precision": "int8", "correction.name": "none"},
            "int8/tis": {"rollout.precision": "int8", "correction.name": "tis"},
            "int8/seq_mis": {"rollout.precision": "int8", "correction.name": "seq_mis"}}


def _shift_evals(path, by: float) -> None:
    """The synthetic writer draws the same evals for every variant of a (method, seed): move
    this run's sampled accuracy after step 0 by `by`, so settings differ."""
    lines = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    for r in lines:
        if r["kind"] == "eval" and r["step"] > 0:
            r["sampled_accuracy"] += by
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def _final_sampled(path) -> float:
    evals = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    return float(np.mean([e["sampled_accuracy"] for e in evals if e["kind"] == "eval"][-3:]))


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    from tests.analysis.conftest import write_run

    root = tmp_path_factory.mktemp("mismatch")
    paths: dict[tuple[str, str, int], object] = {}
    for seed in SEEDS:
        for method in ("ppo", "bapo"):
            paths[(method, "fp32/none", seed)] = write_run(
                root / "fp32", method, 4, seed, experiment="ramble", steps=6).path
            for i, (name, keys) in enumerate(SETTINGS.items()):
                paths[(method, name, seed)] = write_run(
                    root / "low", method, 4, seed, experiment="ramble", steps=6,
                    extra_config=keys, tag=name.replace("/", "_")).path
                _shift_evals(paths[(method, name, seed)], 0.01 * (i + 1) * (seed + 1) - 0.02 * i)
        # an fp32-only method and an unfinished low-precision run: both left out
        write_run(root / "fp32", "top_entropy", 4, seed, experiment="ramble", steps=6)
    write_run(root / "low", "clip_higher", 4, 0, experiment="ramble", steps=6, status="running",
              extra_config=SETTINGS["int8/none"], tag="int8_none")
    return root, paths


def test_claims_are_the_paired_differences_by_hand(grid, tmp_path):
    root, paths = grid
    assert mismatch_report.main(["--runs", str(root / "low"), str(root / "fp32"),
                                 "--out", str(tmp_path)]) == 0
    claims = pd.read_csv(tmp_path / "claims.csv")
    # three seeds a cell: every row a pilot (no verdict, no Holm test), its numbers shown
    assert len(claims) == 4 and set(claims["verdict"]) == {"pilot"}
    assert (claims["seeds"] == len(SEEDS)).all() and (claims["tests"] == 0).all()
    pairs = {0: (("ppo", "int8/none"), ("ppo", "fp32/none")),
             1: (("ppo", "int8/tis"), ("ppo", "int8/none")),
             2: (("ppo", "int8/seq_mis"), ("ppo", "int8/none")),
             3: (("bapo", "int8/none"), ("ppo", "int8/tis"))}
    for i, (a, b) in pairs.items():
        d = np.array([_final_sampled(paths[(*a, s)]) - _final_sampled(paths[(*b, s)]) for s in SEEDS])
        half = t975(len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
        assert f"{d.mean():+.3f} ± {half:.3f}" in claims.loc[i, "measured"], claims.loc[i, "measured"]
    acc = pd.read_csv(tmp_path / "accuracy.csv")
    assert set(acc["method"]) == {"ppo", "bapo"}  # top_entropy ran at fp32 only; clip_higher unfinished
    assert set(acc["setting"]) == {"fp32/none", *SETTINGS}
    assert (acc["seeds"] == len(SEEDS)).all()
    report = (tmp_path / "REPORT.md").read_text()
    assert "After Holm's correction over the" in report
    assert (tmp_path / "fig_mismatch_accuracy.png").is_file()


def test_no_low_precision_run_is_bad_input(grid, tmp_path, capsys):
    root, _ = grid
    with pytest.raises(SystemExit) as e:
        mismatch_report.main(["--runs", str(root / "fp32"), "--out", str(tmp_path / "out")])
    assert e.value.code == 2
    assert capsys.readouterr().err.startswith("config error: --runs: no run with a low-precision sampler")
    assert not (tmp_path / "out").exists()


def _set_family(path, cpu_model: str) -> None:
    """Stamp a run's fingerprint with a CPU model, as src/_numerics.py records it."""
    meta = json.loads((path / "meta.json").read_text())
    meta["numerics"] = {"isa": "AVX2", "mkl_branch": "AVX2", "cpu_model": cpu_model}
    (path / "meta.json").write_text(json.dumps(meta))


def test_claims_pair_within_the_low_precision_runs_cpu_family(tmp_path):
    """int8 runs on Intel; fp32 partners on AMD (every seed) and on Intel (seeds 0, 1): the
    claim pairs Intel with Intel where it can, and the AMD cells they replace are measured
    against the Intel ones apart, by hand from the files."""
    from tests.analysis.conftest import write_run

    intel, amd = "Intel(R) Xeon(R) Processor", "AMD EPYC"
    low, fp32_intel, fp32_amd = {}, {}, {}
    for seed in SEEDS:
        low[seed] = write_run(tmp_path / "low", "ppo", 4, seed, experiment="ramble", steps=6,
                              extra_config=SETTINGS["int8/none"], tag="int8_none").path
        _set_family(low[seed], intel)
        _shift_evals(low[seed], -0.01 * (seed + 1))
        fp32_amd[seed] = write_run(tmp_path / "amd", "ppo", 4, seed, experiment="ramble",
                                   steps=6).path
        _set_family(fp32_amd[seed], amd)
        _shift_evals(fp32_amd[seed], 0.05 + 0.02 * seed)
        if seed < 2:
            fp32_intel[seed] = write_run(tmp_path / "intel", "ppo", 4, seed, experiment="ramble",
                                         steps=6, tag="fp32_intel").path
            _set_family(fp32_intel[seed], intel)
            _shift_evals(fp32_intel[seed], 0.03 * seed)
    out = tmp_path / "out"
    assert mismatch_report.main(["--runs", *(str(tmp_path / d) for d in ("low", "amd", "intel")),
                                 "--out", str(out)]) == 0
    # claim 1 pairs seeds 0 and 1 with Intel's fp32 cells and seed 2 with AMD's (no Intel one)
    partner = {0: fp32_intel[0], 1: fp32_intel[1], 2: fp32_amd[2]}
    d = np.array([_final_sampled(low[s]) - _final_sampled(partner[s]) for s in SEEDS])
    half = t975(len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    claims = pd.read_csv(out / "claims.csv")
    assert f"{d.mean():+.3f} ± {half:.3f}" in claims.loc[0, "measured"], claims.loc[0, "measured"]
    fams = pd.read_csv(out / "families.csv")
    assert fams[["method", "other family", "seeds"]].values.tolist() == [
        ["ppo", "AuthenticAMD/AVX2/MKL AUTO", 2]]
    e = np.array([_final_sampled(fp32_intel[s]) - _final_sampled(fp32_amd[s]) for s in (0, 1)])
    half = t975(1) * e.std(ddof=1) / np.sqrt(2)
    assert fams.loc[0, "sampled (primary): this - other"].startswith(f"{e.mean():+.3f} ± {half:.3f}")
    assert fams.loc[0, "sampled (primary): same-seed r"] == "-"  # two seeds give no correlation
    report = (out / "REPORT.md").read_text()
    assert "GenuineIntel/AVX2/MKL AVX2" in report and "what a last-bit perturbation" in report
    # each family's fp32 gain over its warm start, by hand: final minus the step-0 eval; AMD's
    # seed 2 is a claim partner (no Intel one) and still an AMD cell
    def gain(path) -> float:
        evals = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
        return _final_sampled(path) - [e for e in evals if e["kind"] == "eval"][0]["sampled_accuracy"]

    rep = pd.read_csv(out / "replication.csv").set_index("family")
    for family, cells in (("GenuineIntel/AVX2/MKL AVX2", fp32_intel),
                          ("AuthenticAMD/AVX2/MKL AUTO", fp32_amd)):
        g = np.array([gain(p) for p in cells.values()])
        half = t975(len(g) - 1) * g.std(ddof=1) / np.sqrt(len(g))
        assert rep.loc[family, "comparison"] == "ppo: gain over its warm start"
        assert rep.loc[family, "sampled (primary)"] == f"{g.mean():.3f} ± {half:.3f} (n={len(g)})"


def test_family_table_correlates_the_same_seeds_by_hand():
    from analysis.reports.mismatch import FP32, family_table

    # this family 0.20, 0.25, 0.30, 0.35; the other 0.22, 0.24, 0.33, 0.33:
    # deviations from the means 0.275 and 0.28: (-0.075, -0.025, 0.025, 0.075) and
    # (-0.06, -0.04, 0.05, 0.05): sum of products 0.0105, sums of squares 0.0125 and 0.0102
    # -> r = 0.0105 / sqrt(0.0125 * 0.0102) = 0.93
    ours = pd.DataFrame({"experiment": FP32, "method": "bapo", "family": "A", "seed": range(4),
                         "final_sampled_acc": [0.20, 0.25, 0.30, 0.35],
                         "final_greedy_acc": [0.1, 0.2, 0.3, 0.4]})
    theirs = ours.assign(family="B", final_sampled_acc=[0.22, 0.24, 0.33, 0.33],
                         final_greedy_acc=[0.4, 0.3, 0.2, 0.1])
    row = family_table(ours, theirs).iloc[0]
    r = 0.0105 / np.sqrt(0.0125 * 0.0102)
    assert row["sampled (primary): same-seed r"] == f"{r:.2f}"
    assert row["greedy: same-seed r"] == "-1.00"


def test_accuracy_figure_has_the_warm_start_line_and_an_axis_from_0(tmp_path, monkeypatch):
    import matplotlib.axes

    from analysis.figures.contract import Options
    from analysis.figures.mismatch import draw_accuracy

    # step-0 evals are final minus gain: sampled 0.23 and 0.25 (mean 0.24), greedy 0.14
    s = pd.DataFrame({"method": ["ppo", "ppo"], "experiment": ["fp32/none", "int8/none"],
                      "final_sampled_acc": [0.27, 0.26], "gain_sampled_acc": [0.04, 0.01],
                      "final_greedy_acc": [0.24, 0.18], "gain_greedy_acc": [0.10, 0.04]})
    limits = []
    real = matplotlib.axes.Axes.set_ylim
    monkeypatch.setattr(matplotlib.axes.Axes, "set_ylim",
                        lambda ax, *a, **k: limits.append(a) or real(ax, *a, **k))
    res = draw_accuracy(s, Options(out=tmp_path, formats=("png",), dpi=30))
    start = res.data[res.data["method"] == "warm start"].set_index("metric")["mean"]
    assert start["final_sampled_acc"] == pytest.approx(0.24)
    assert start["final_greedy_acc"] == pytest.approx(0.14)
    ours = [a for a in limits if len(a) == 2]  # the figure's own (low, high) calls
    assert [lo for lo, _ in ours] == [0, 0]  # both panels start at 0
    assert ours[0][1] == pytest.approx(0.27 * 1.1)
