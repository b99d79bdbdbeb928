"""The accuracy-by-step, IS-weight and BAPO rho figures: what each plots, recomputed with
plain pandas from the rows the synthetic writer produced."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.figures import eval_steps as fig_eval_steps
from analysis.figures import ratio as fig_ratio
from analysis.figures import rho as fig_rho
from analysis.figures.contract import SkipFigure


def written_rows(written, kind: str, pred=lambda m, k, s: True) -> pd.DataFrame:
    return pd.DataFrame([{**r, "method": m, "staleness": k, "seed": s}
                         for (m, k, s), run in written.items() if pred(m, k, s)
                         for r in getattr(run, kind)])


def test_accuracy_by_step(sweep, runset, opts):
    _, written = sweep
    res = fig_eval_steps.fig_accuracy_by_step(runset, opts)
    assert res.paths[0].stat().st_size > 0
    evals = written_rows(written, "evals")
    for metric in ("sampled_accuracy", "greedy_accuracy"):
        want = evals.groupby(["method", "staleness", "step"])[metric].mean()
        got = res.data[res.data["metric"] == metric].set_index(["method", "staleness", "step"])
        pd.testing.assert_series_equal(got["mean"].sort_index(), want.sort_index(),
                                       check_names=False, check_index_type=False)
        # The warm-start line: every run's step-0 eval, averaged.
        start = evals.loc[evals["step"] == 0, metric].mean()
        assert res.extra["start"][metric].item() == pytest.approx(start)
    assert sorted(res.data["step"].unique()) == [0, 2, 4]


def test_accuracy_by_step_counts_updates_where_levels_end_at_equal_updates(tmp_path, opts,
                                                                          write_run):
    from analysis.core.loader import load_runs

    # 8 steps at 1x and 2 at 4x both end at 8 optimizer updates (k per step at kx)
    write_run(tmp_path / "equal", "ppo", 1, 0, steps=8, evals_every=2)
    write_run(tmp_path / "equal", "ppo", 4, 0, steps=2, evals_every=1)
    res = fig_eval_steps.fig_accuracy_by_step(load_runs([tmp_path / "equal"]), opts)
    assert res.extra["x"] == "updates"
    got = res.data.drop_duplicates(["staleness", "step"]).set_index(["staleness", "step"])
    assert got["updates"].to_dict() == {(1, 0): 0, (1, 2): 2, (1, 4): 4, (1, 6): 6, (1, 8): 8,
                                        (4, 0): 0, (4, 1): 4, (4, 2): 8}
    # the step curves (fig02 and its kin) carry the same count: step x k
    from analysis.figures import training as fig_training

    curves = fig_training.fig02_staleness(load_runs([tmp_path / "equal"]), opts).data
    assert (curves["updates"] == curves["step"] * curves["staleness"]).all()
    assert set(curves.loc[curves["staleness"] == 4, "updates"]) == {0, 4}
    # equal steps (4 at each level) end at unequal updates: the axis stays on steps
    write_run(tmp_path / "steps", "ppo", 1, 0)
    write_run(tmp_path / "steps", "ppo", 4, 0)
    res = fig_eval_steps.fig_accuracy_by_step(load_runs([tmp_path / "steps"]), opts)
    assert res.extra["x"] == "step"


def test_accuracy_by_step_skips_without_evals(runset, opts):
    import dataclasses

    with pytest.raises(SkipFigure, match="no eval records"):
        fig_eval_steps.fig_accuracy_by_step(
            dataclasses.replace(runset, evals=runset.evals.iloc[0:0]), opts)


def test_is_ratio_by_staleness(sweep, runset, opts):
    _, written = sweep
    res = fig_ratio.fig_is_ratio_by_staleness(runset, opts)
    assert res.paths[0].stat().st_size > 0
    tok = pd.concat([r.tokens.assign(staleness=k, seed=s) for (m, k, s), r in written.items()
                     if m == "ppo"], ignore_index=True)
    ratio = tok["ratio"].astype("float64")
    tok["outside"] = (ratio < 0.8) | (ratio > 1.2)  # ppo's clip range, from its config
    want = tok.groupby(["staleness", "seed", "update"])["outside"].mean()
    got = res.data.set_index(["staleness", "seed", "update"])["share_outside"]
    pd.testing.assert_series_equal(got.sort_index(), want.sort_index(), check_names=False,
                                   check_index_type=False)
    assert (res.data.query("update == 0")["share_outside"] == 0).all()  # on-policy: r = 1
    # The legend's pooled share: stale updates (1..k-1) of every seed; at 1x update 0.
    stale = tok[(tok["update"] > 0) | (tok["staleness"] == 1)]
    pooled = stale.groupby("staleness")["outside"].mean()
    got = res.extra["pooled"].set_index("staleness")["share_outside"]
    assert got.to_dict() == pytest.approx(pooled.to_dict())
    assert got[4] > 0 and got[1] == 0
    with pytest.raises(SkipFigure, match="no 'ppo' runs"):
        fig_ratio.fig_is_ratio_by_staleness(runset.subset(lambda r: r.method != "ppo"), opts)


def test_bapo_rho_before(sweep, runset, opts):
    _, written = sweep
    res = fig_rho.fig_bapo_rho_before(runset, opts)
    assert res.paths[0].stat().st_size > 0
    ups = written_rows(written, "updates", lambda m, k, s: m == "bapo")
    stale = ups[(ups["update"] > 0) & ups["rho_before"].notna()]
    assert len(res.data) == len(stale)
    assert np.allclose(np.sort(res.data["rho_before"]), np.sort(stale["rho_before"]))
    shares = res.extra["shares"].set_index("staleness")
    for k, g in stale.groupby("staleness"):
        below = g["rho_before"] < 0.4  # rho0 of the synthetic bapo config
        assert shares.loc[k, "below_rho0"] == pytest.approx(below.mean())
        assert shares.loc[k, "updates"] == len(g)
        rise = (g.loc[below, "rho"] - g.loc[below, "rho_before"]).mean() if below.any() else 0
        assert shares.loc[k, "mean_rise_below"] == pytest.approx(round(rise, 3))
    with pytest.raises(SkipFigure, match="no bapo runs"):
        fig_rho.fig_bapo_rho_before(runset.subset(lambda r: r.method == "ppo"), opts)
