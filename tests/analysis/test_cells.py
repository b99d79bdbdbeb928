"""Only seeds of one cell are pooled: experiments and configs never mix, and each table
names the experiment; make_figures writes its own output dir and leaves no stale file."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis import make_figures
from analysis.core.cells import one_update_budget
from analysis.core.loader import load_runs
from analysis.core.summary import run_summary
from analysis.reports.paper_tables import results_table


def test_smoke_runs_are_never_seeds_of_the_2x_cell(tmp_path, write_run):
    root = tmp_path / "runs"
    for seed in (0, 1):
        write_run(root, "ppo", 2, seed, experiment="smoke", steps=3)
        write_run(root, "ppo", 2, seed, experiment="staleness", steps=4)
    runs = load_runs([root])
    assert len(runs.runs) == 4 and len(runs.suites) == 2  # 3 vs 4 steps: not comparable
    results = results_table(run_summary(runs)).query("metric == 'final_reward'")
    assert sorted(results["experiment"]) == ["smoke", "staleness"]
    assert results["n"].tolist() == [2, 2]  # each cell has its own two seeds, nothing pooled
    # Neither dedupe nor grouping merged them: every run dir is still there.
    assert sorted(r.path.parent.parent.name for r in runs.runs) == [
        "smoke_2x", "smoke_2x", "staleness_2x", "staleness_2x"
    ]


def test_levels_at_equal_updates_are_one_suite_and_other_budgets_are_not(tmp_path, write_run):
    # The ramble testbed's design: 1x 8 rollouts, 2x 4, 4x 2 (8 updates each), evals every
    # 4 updates. One suite, three cells. A 4x run at 4 rollouts (16 updates) is another
    # comparison: it splits off, with the levels it does not match.
    root = tmp_path / "runs"
    for staleness, steps in ((1, 8), (2, 4), (4, 2)):
        write_run(root, "ppo", staleness, 0, experiment="ramble", steps=steps,
                  extra_config={"eval.every": 4 // staleness})
    runs = load_runs([root])
    assert len(runs.suites) == 1 and len({r.cell for r in runs.runs}) == 3
    write_run(root, "bapo", 4, 0, experiment="ramble", steps=4, extra_config={"eval.every": 1})
    assert len(load_runs([root]).suites) > 1


@pytest.mark.parametrize(("budgets", "one"), [
    # (steps, updates per step, eval.every): the ramble grid, 120 updates and evals every 20
    ({(120, 1, 20), (60, 2, 10), (30, 4, 5)}, True),
    ({(30, 1, 5), (30, 4, 5)}, False),          # one step budget: the step axis, as before
    ({(120, 1, 20), (30, 4, 10)}, False),       # 120 updates each, evals at 20 vs 40 updates
    ({(120, 1, 20), (60, 4, 5)}, False),        # 120 vs 240 updates
    ({(30, 4, 5)}, False),                      # one level
])
def test_one_update_budget_by_hand(budgets, one):
    assert one_update_budget(budgets) is one


def test_a_suite_is_named_by_how_it_differs_from_the_largest_one(tmp_path, write_run):
    root = tmp_path / "runs"
    for seed in (0, 1, 2):  # the largest suite: 6 runs at the default config
        write_run(root, "ppo", 1, seed, experiment="staleness")
        write_run(root, "ppo", 2, seed, experiment="staleness")
    for seed in (0, 1):  # a smaller one of other experiments that changes one key
        write_run(root, "ppo", 4, seed, experiment="coin", extra_config={"task.reward": "random"},
                  tag="random")
    runs = load_runs([root])
    main, other = runs.suites
    assert "[" not in main  # the largest suite keeps its plain name
    assert other == "coin [task.reward=random]"


def test_sibling_suites_are_named_by_their_difference_and_by_the_largest_ones(tmp_path,
                                                                             write_run):
    # two coin-flip suites of the same experiments that differ in steps: each name says both
    # what sets it apart from the main grid (coin flips) and from its sibling (steps)
    root = tmp_path / "runs"
    for seed in (0, 1, 2):
        for k in (1, 2):
            write_run(root, "ppo", k, seed, experiment="staleness")
    for seed in (0, 1):
        for steps in (4, 6):
            write_run(root, "ppo", 4, seed, experiment="coin", steps=steps,
                      extra_config={"task.reward": "random"}, tag=f"steps{steps}")
    main, *coin = load_runs([root]).suites
    assert "[" not in main
    assert sorted(coin) == ["coin [task.reward=random, train.steps=4]",
                            "coin [task.reward=random, train.steps=6]"]


def test_two_experiments_of_one_staleness_in_one_suite_are_named_apart(tmp_path, write_run):
    root = tmp_path / "runs"
    write_run(root, "ppo", 2, 0, experiment="a")
    write_run(root, "ppo", 2, 0, experiment="b")
    runs = load_runs([root])
    assert len(runs.suites) == 1
    assert sorted(r.method for r in runs.runs) == ["ppo [a]", "ppo [b]"]


def test_a_parameter_sweep_is_one_suite_with_labelled_variants(tmp_path, write_run):
    root = tmp_path / "runs"
    for rho0 in (0.3, 0.5):
        for seed in (0, 1):
            write_run(root, "bapo", 4, seed, extra_config={"method.bapo.rho0": rho0},
                      tag=f"rho0={rho0}")
    write_run(root, "ppo", 4, 0)
    runs = load_runs([root])
    assert len(runs.suites) == 1
    assert sorted({r.method for r in runs.runs}) == [
        "bapo (bapo.rho0=0.3)", "bapo (bapo.rho0=0.5)", "ppo"
    ]
    results = results_table(run_summary(runs)).query("metric == 'final_reward'")
    assert results.set_index("method")["n"].to_dict() == {
        "bapo (bapo.rho0=0.3)": 2, "bapo (bapo.rho0=0.5)": 2, "ppo": 1
    }


def test_an_ablation_beside_the_methods_own_parameters_leaves_their_label_plain(
    tmp_path, write_run
):
    # the yaml's own parameters, written out in full as src.run writes them
    own = {"method.aggregation": "token-mean", **{
        f"method.bapo.{k}": v for k, v in {
            "rho0": 0.4, "low_start": 0.6, "low_max": 0.9, "high_start": 1.2,
            "high_max": 3.0, "high_step": 0.05, "low_step": 0.02, "contribution": "gradient",
            "weights": "uniform", "order": "paper", "search": "fast", "dual_clip_c": None,
        }.items()}}
    root = tmp_path / "runs"
    for seed in (0, 1):
        write_run(root, "bapo", 4, seed, extra_config=own)
        write_run(root, "bapo", 4, seed, extra_config={**own, "method.bapo.low_start": 0.8},
                  tag="low_start=0.8")
    write_run(root, "ppo", 4, 0)
    runs = load_runs([root])
    assert len(runs.suites) == 1
    assert sorted(r.method for r in runs.runs) == [
        "bapo", "bapo", "bapo (bapo.low_start=0.8)", "bapo (bapo.low_start=0.8)", "ppo"]
    # one more variant of its own: still labelled by what it changes from the yaml alone
    write_run(root, "bapo", 4, 0, extra_config={**own, "method.bapo.rho0": 0.3}, tag="rho0")
    labels = {r.method for r in load_runs([root]).runs}
    assert labels == {"bapo", "bapo (bapo.low_start=0.8)", "bapo (bapo.rho0=0.3)", "ppo"}


def test_fig09_draws_each_variant_of_a_sweep_with_its_own_rho0(tmp_path, write_run, opts):
    from analysis.figures import training as fig_training

    root = tmp_path / "runs"
    for rho0 in (0.3, 0.5):
        write_run(root, "bapo", 4, 0, extra_config={"method.bapo.rho0": rho0}, tag=str(rho0))
    write_run(root, "ppo", 4, 0)
    res = fig_training.fig09_bapo_vs_ppo(load_runs([root]), opts)
    assert set(res.data["method"]) == {"bapo (bapo.rho0=0.3)", "bapo (bapo.rho0=0.5)", "ppo"}
    assert res.extra["rho0"] == [0.3, 0.5]


def test_the_same_run_through_two_roots_counts_once_but_another_config_does_not(
    tmp_path, write_run
):
    import shutil

    a = tmp_path / "a"
    write_run(a, "ppo", 2, 0)
    shutil.copytree(a, tmp_path / "b")
    write_run(tmp_path / "c", "ppo", 2, 0, extra_config={"train.lr": 1e-4})
    runs = load_runs([a, tmp_path / "b", tmp_path / "c"])
    assert len(runs.runs) == 2
    assert any("duplicate of" in why for _, why in runs.skipped)


def _files(out: Path) -> set[str]:
    return {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}


def test_make_figures_writes_outputs_not_figures_by_default():
    assert make_figures.parse_args([]).out == "outputs/figures"


@pytest.mark.slow
def test_make_figures_leaves_no_stale_file(tmp_path, write_run):
    root = tmp_path / "runs"
    write_run(root, "ppo", 2, 0)
    write_run(root, "ppo", 2, 0, experiment="smoke", steps=3)
    out = tmp_path / "out"
    args = ["--runs", str(root), "--out", str(out), "--dpi", "30"]
    assert make_figures.main([*args, "--only", "fig02", "fig11"]) == 0
    first = _files(out)
    assert {"fig02_staleness_ppo.pdf", "fig11_final_accuracy.png", "REPORT.md"} <= first
    suite_dirs = {f.split("/")[1] for f in first if f.startswith("suites/")}
    assert len(suite_dirs) == 1  # the second suite's figures
    (out / "notes.txt").write_text("mine")  # not the tool's: left alone
    assert make_figures.main([*args, "--only", "fig11", "--formats", "png"]) == 0
    again = _files(out)
    assert again == {"notes.txt", "REPORT.md", "results.csv", "claims.csv", "claim_counts.csv",
                     "runs.csv", "fig11_final_accuracy.png",
                     *{f for f in again if f.startswith("suites/")}}
    assert all(f.endswith("fig11_final_accuracy.png") for f in again if f.startswith("suites/"))
    assert not list(tmp_path.glob(".out.*"))  # the staging dir is gone


def test_a_crash_leaves_the_output_dir_as_it_was(tmp_path, write_run, monkeypatch):
    root = tmp_path / "runs"
    write_run(root, "ppo", 2, 0)
    out = tmp_path / "out"
    args = ["--runs", str(root), "--out", str(out), "--dpi", "30", "--only", "fig11"]
    assert make_figures.main(args) == 0
    before = {f: (out / f).read_bytes() for f in _files(out)}

    def broken(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(make_figures, "write_report", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        make_figures.main([*args, "--formats", "pdf"])
    assert {f: (out / f).read_bytes() for f in _files(out)} == before
    assert not list(tmp_path.glob(".out.*"))


def test_the_same_cell_and_seed_made_on_two_cpu_families_are_two_runs(tmp_path, write_run):
    """A copy of a run counts once; a rerun of its config and seed on another CPU family has
    other numbers (the families round apart) and counts as a run of its own."""
    import json
    import shutil

    a = tmp_path / "a"
    run = write_run(a, "ppo", 2, 0)
    meta = json.loads((run.path / "meta.json").read_text())
    meta["numerics"] = {"isa": "AVX2", "mkl_branch": "AVX2", "cpu_model": "AMD EPYC"}
    (run.path / "meta.json").write_text(json.dumps(meta))
    shutil.copytree(a, tmp_path / "copy")
    shutil.copytree(a, tmp_path / "intel")
    intel_meta = next((tmp_path / "intel").rglob("meta.json"))
    meta["numerics"]["cpu_model"] = "Intel(R) Xeon(R) Processor"
    intel_meta.write_text(json.dumps(meta))
    runs = load_runs([a, tmp_path / "copy", tmp_path / "intel"])
    assert sorted(r.numerics_family for r in runs.runs) == [
        "AuthenticAMD/AVX2/MKL AUTO", "GenuineIntel/AVX2/MKL AVX2"]
    assert [why for _, why in runs.skipped] == [
        "duplicate of a/sweep_2x/ppo/seed0 (same config, seed and CPU family); kept the longer one"]
