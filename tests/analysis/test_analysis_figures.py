"""Each figure: file written, plotted data equal to an independent pandas computation
from the rows the synthetic writer produced, and a clear skip when its runs are missing."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from analysis import fig_bounds, fig_final, fig_tokens, fig_training, style
from analysis.plotting import SkipFigure


def records(written, kind: str, pred=lambda m, k, s: True) -> pd.DataFrame:
    """The written records of one kind, with method/staleness/seed attached."""
    rows = []
    for (m, k, s), run in written.items():
        if pred(m, k, s):
            rows += [{**r, "method": m, "staleness": k, "seed": s} for r in getattr(run, kind)]
    return pd.DataFrame(rows)


def tokens(written, pred) -> pd.DataFrame:
    return pd.concat(
        [
            r.tokens.assign(method=m, staleness=k, seed=s)
            for (m, k, s), r in written.items()
            if pred(m, k, s)
        ],
        ignore_index=True,
    )


def assert_curves(res, expected: pd.DataFrame, metrics: list[str]) -> None:
    """res.data (long: metric/method/staleness/step -> mean) equals the expected means."""
    exp = expected.groupby(["method", "staleness", "step"])[metrics].mean()
    got = res.data.pivot_table(
        index=["method", "staleness", "step"], columns="metric", values="mean"
    )[metrics]
    pd.testing.assert_frame_equal(
        got.sort_index(), exp.sort_index(), check_names=False, check_dtype=False
    )


def assert_files(res) -> None:
    assert res.paths and all(p.exists() and p.stat().st_size > 0 for p in res.paths)


def test_fig02_staleness(sweep, runset, opts):
    _, written = sweep
    res = fig_training.fig02_staleness(runset, opts)
    assert_files(res)
    exp = records(written, "steps", lambda m, k, s: m == "ppo")
    metrics = ["reward_mean", "entropy_mean", "clip_frac", "grad_norm"]
    assert_curves(res, exp, metrics)
    assert set(res.data["staleness"]) == {1, 2, 4}
    # The band, by hand: two seeds, t(0.975, 1) = 12.706.
    two = exp[(exp["staleness"] == 2) & (exp["step"] == 3)]["reward_mean"]
    half = 12.706 * two.std(ddof=1) / math.sqrt(2)
    row = res.data.query("metric == 'reward_mean' and staleness == 2 and step == 3")
    assert row["ci_low"].item() == pytest.approx(two.mean() - half)
    assert row["ci_high"].item() == pytest.approx(two.mean() + half)
    with pytest.raises(SkipFigure, match="no 'ppo' runs"):
        fig_training.fig02_staleness(runset.subset(lambda r: r.method != "ppo"), opts)


def test_fig04_contribution_and_fig06_length(sweep, runset, opts):
    _, written = sweep
    exp = records(written, "steps", lambda m, k, s: m == "ppo")
    exp["contrib_grad_neg_share"] = 1 - exp["contrib_grad_pos_share"]
    res = fig_training.fig04_contribution(runset, opts)
    assert_files(res)
    assert_curves(
        res,
        exp,
        ["contrib_grad_pos_share", "contrib_grad_neg_share", "token_share_pos", "token_share_neg"],
    )
    res = fig_training.fig06_length(runset, opts)
    assert_files(res)
    assert_curves(res, exp, ["response_length_pos", "response_length_neg"])
    no_ppo = runset.subset(lambda r: r.method != "ppo")
    for fn in (fig_training.fig04_contribution, fig_training.fig06_length):
        with pytest.raises(SkipFigure, match="no 'ppo' runs"):
            fn(no_ppo, opts)


def test_fig07_asymmetric(sweep, runset, opts):
    _, written = sweep
    res = fig_training.fig07_asymmetric(runset, opts)
    assert_files(res)
    want = {"clip_0.8_1.5", "clip_0.5_1.2", "ppo"}
    exp = records(written, "steps", lambda m, k, s: m in want and k == 4)
    assert_curves(res, exp, ["reward_mean", "entropy_mean"])
    assert set(res.data["method"]) == want and set(res.data["staleness"]) == {4}
    with pytest.raises(SkipFigure, match="clip_0.8_1.5 or clip_0.5_1.2 at 4x"):
        fig_training.fig07_asymmetric(runset.subset(lambda r: r.method in ("ppo", "bapo")), opts)


def test_fig08_bapo_bounds(sweep, runset, opts):
    _, written = sweep
    res = fig_bounds.fig08_bapo_bounds(runset, opts)
    assert_files(res)
    assert_curves(res, records(written, "steps", lambda m, k, s: m == "bapo"), ["c_low", "c_high"])
    ranges = res.extra["ranges"]
    assert ranges.to_dict("records") == [
        {"low_start": 0.6, "low_max": 0.9, "high_start": 1.2, "high_max": 3.0}
    ]
    with pytest.raises(SkipFigure, match="no bapo runs"):
        fig_bounds.fig08_bapo_bounds(runset.subset(lambda r: r.method == "ppo"), opts)


def test_fig09_bapo_vs_ppo(sweep, runset, opts):
    _, written = sweep
    res = fig_training.fig09_bapo_vs_ppo(runset, opts)
    assert_files(res)
    # ppo also ran at 1x, bapo did not: only the shared staleness levels are compared.
    exp = records(written, "steps", lambda m, k, s: m in ("bapo", "ppo") and k in (2, 4))
    assert_curves(res, exp, ["reward_mean", "entropy_mean", "contrib_grad_pos_share", "grad_norm"])
    with pytest.raises(SkipFigure, match="both 'bapo' and 'ppo'"):
        fig_training.fig09_bapo_vs_ppo(runset.subset(lambda r: r.method != "bapo"), opts)


def test_fig05_prob_by_ratio(sweep, runset, opts):
    _, written = sweep
    res = fig_tokens.fig05_prob_by_ratio(runset, opts)
    assert_files(res)
    tok = tokens(written, lambda m, k, s: m == "ppo" and k > 1)
    tok = tok[tok["advantage"] != 0]
    edges = [0, 0.6, 0.8, 1.0, 1.2, 1.4, 2.0, np.inf]
    tok["bin"] = pd.cut(tok["ratio"], edges, right=False, labels=False)
    tok["sign"] = np.where(tok["advantage"] > 0, "A>0", "A<0")
    tok["prob"] = np.exp(tok["logp"].astype("float64"))
    exp = tok.groupby(["staleness", "bin", "sign"])["prob"].agg(["count", "median"])
    got = res.data.assign(bin=res.data["ratio_bin"].cat.codes)
    got = got.groupby(["staleness", "bin", "sign"])["prob"].agg(["count", "median"])
    pd.testing.assert_frame_equal(
        got.sort_index(), exp.sort_index(), check_dtype=False, check_index_type=False
    )
    with pytest.raises(SkipFigure, match="staleness > 1"):
        fig_tokens.fig05_prob_by_ratio(runset.subset(lambda r: r.staleness == 1), opts)


def test_fig10_prob_ratio_entropy(sweep, runset, opts):
    _, written = sweep
    res = fig_tokens.fig10_prob_ratio_entropy(runset, opts)
    assert_files(res)
    assert set(res.data["staleness"]) == {4}  # every method's highest staleness here
    for method, got in res.data.groupby("method", observed=True):
        tok = tokens(written, lambda m, k, s, method=method: m == method and k == 4)
        p80 = np.quantile(tok["entropy"].astype("float64"), 0.8)
        assert got["entropy_p80"].unique() == pytest.approx([p80])
        # Small runs: every row is drawn, so the dots are exactly the token rows.
        assert np.allclose(np.sort(got["entropy"]), np.sort(tok["entropy"].astype("float64")))
        assert (got["high_entropy"] == (got["entropy"] >= p80)).all()
    with pytest.raises(SkipFigure, match="staleness > 1"):
        fig_tokens.fig10_prob_ratio_entropy(runset.subset(lambda r: r.staleness == 1), opts)


def test_fig11_final_accuracy(sweep, runset, opts):
    _, written = sweep
    res = fig_final.fig11_final_accuracy(runset, opts)
    assert_files(res)
    exp = {
        (m, k, s, metric): r.evals[-1][metric]
        for (m, k, s), r in written.items()
        for metric in ("sampled_accuracy", "greedy_accuracy")
    }
    got = {(r.method, r.staleness, r.seed, r.metric): r.value for r in res.data.itertuples()}
    assert got == pytest.approx(exp)
    assert (res.data["step"] == 4).all()  # the eval after the last step
    empty = dataclasses.replace(runset, evals=runset.evals.iloc[0:0])
    with pytest.raises(SkipFigure, match="no eval records"):
        fig_final.fig11_final_accuracy(empty, opts)


def test_entropy_quadrants(sweep, runset, opts, tmp_path, write_run):
    _, written = sweep
    res = fig_tokens.fig_entropy_quadrants(runset, opts)
    assert_files(res)
    tok = tokens(written, lambda m, k, s: True)
    tok = tok[tok["advantage"] != 0]
    prob = np.exp(tok["logp"].astype("float64"))
    tok["kind"] = (
        np.where(prob >= 0.5, "high p", "low p")
        + ", "
        + np.where(tok["advantage"] > 0, "A>0", "A<0")
    )
    tok["clipped"] = tok["clip_state"] != "none"
    exp = tok.groupby(["method", "staleness", "seed", "kind"])["clipped"].mean()
    got = res.data.set_index(["method", "staleness", "seed", "kind"])["clip_share"]
    pd.testing.assert_series_equal(
        got.sort_index().dropna(), exp.sort_index(), check_names=False, check_index_type=False
    )
    steps = records(written, "steps")
    drop = steps.groupby(["method", "staleness", "seed"]).apply(
        lambda g: g["entropy_mean"].iloc[0] - g["entropy_mean"].tail(opts.last_k).mean()
    )
    got = res.extra["entropy"].set_index(["method", "staleness", "seed"])["entropy_drop"]
    pd.testing.assert_series_equal(got.sort_index(), drop.sort_index(), check_names=False)

    write_run(tmp_path / "runs", "ppo", 2, 0, write_tokens=False)
    from analysis.loader import load_runs

    no_tokens = load_runs([tmp_path / "runs"])
    with pytest.raises(SkipFigure, match="no runs with readable token parts"):
        fig_tokens.fig_entropy_quadrants(no_tokens, opts)
    assert any("no token parts" in m for m in no_tokens.messages)


def test_style_maps_are_fixed_and_deterministic():
    pal = style.method_palette(["ppo", "bapo", "my_new_method", "another"])
    assert pal["ppo"] == style.KNOWN_METHOD_COLORS["ppo"]
    assert pal == style.method_palette(["another", "my_new_method", "bapo", "ppo"])
    assert pal["my_new_method"] != pal["another"]
    assert pal["my_new_method"] not in style.KNOWN_METHOD_COLORS.values()
    dashes = style.staleness_dashes([1, 2, 4, 8, 16])
    assert dashes[1] == "" and dashes[16] == style.staleness_dashes([16])[16]


def test_figures_are_byte_identical_on_rerun(runset, opts, tmp_path):
    # Committed figures are checked by regenerating them: same data must give same bytes.
    from dataclasses import replace

    from analysis.fig_bounds import fig08_bapo_bounds

    opts = replace(opts, formats=("png", "pdf"))
    first = {p.name: p.read_bytes() for p in fig08_bapo_bounds(runset, opts).paths}
    again = {p.name: p.read_bytes() for p in fig08_bapo_bounds(runset, opts).paths}
    assert set(first) == {"fig08_bapo_bounds.png", "fig08_bapo_bounds.pdf"}
    assert first == again
