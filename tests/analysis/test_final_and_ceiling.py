"""Final accuracy (mean of the last three evals, with where they fall) and BAPO's reach rate
against its ceiling, on synthetic runs and hand-made records."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from analysis.core.final import alignment_note, final_window
from analysis.core.loader import load_runs
from analysis.core.search_ceiling import annotate, grid_end, reach


def _delayed(write_run, root, method, seed, delay, steps, staleness=4):
    cfg = {"offpolicy.source": "delay", "offpolicy.delay": delay} if delay else {}
    return write_run(root, method, staleness, seed, experiment=f"delay{delay}", steps=steps,
                     evals_every=2, extra_config=cfg)


def test_final_is_the_mean_of_the_last_three_evals_after_step_0(tmp_path, write_run):
    # 8 steps, an eval every 2: steps 0, 2, 4, 6, 8 -> the last three after step 0: 4, 6, 8
    run = _delayed(write_run, tmp_path, "ppo", 0, 2, steps=8)
    w = final_window(load_runs([tmp_path])).iloc[0]
    last = [e for e in run.evals if e["step"] in (4, 6, 8)]
    assert w["greedy_accuracy"] == pytest.approx(np.mean([e["greedy_accuracy"] for e in last]))
    assert w["sampled_accuracy"] == pytest.approx(np.mean([e["sampled_accuracy"] for e in last]))
    assert (w["final_evals"], w["final_eval_steps"]) == (3, "4/6/8")
    # 4 updates a step, the delay's 2 warm-up steps included: 16/24/32; 8 - 2 own steps
    assert (w["final_updates"], w["own_policy_steps"]) == ("16/24/32", 6)


def test_cells_at_unequal_updates_say_how_they_are_aligned(tmp_path, write_run):
    _delayed(write_run, tmp_path, "m2po", 0, 2, steps=8)  # 4 updates a step, 2 warm-up
    _delayed(write_run, tmp_path, "ppo", 0, 0, steps=6, staleness=1)  # 1 update a step
    w = final_window(load_runs([tmp_path])).set_index("method")
    m2, on = w.loc[["m2po"]], w.loc[["ppo"]]
    note = alignment_note(m2, on, ("m2po @ 8-11", "ppo @ 0"))
    assert note == ("not at equal updates, aligned by each run's last 3 evals: m2po @ 8-11 at "
                    "updates 16/24/32 (steps 4/6/8; 6 steps on its own policy's rollouts) vs "
                    "ppo @ 0 at updates 2/4/6 (steps 2/4/6; 6 steps on its own policy's "
                    "rollouts)")
    assert alignment_note(on, on, ("a", "b")) == ""  # the same updates: nothing to say


BAPO_GRID = {"method.bapo.low_step": 0.02, "method.bapo.high_step": 0.05,
             "method.bapo.contribution": "gradient", "method.bapo.order": "paper"}


@pytest.mark.parametrize("changes,end", [
    ({}, (0.9, 3.0)),  # the paper's grid: 0.6..0.9 by 0.02, 1.2..3.0 by 0.05
    ({"method.bapo.order": "official", "method.bapo.low_max": 0.85, "method.bapo.low_step": 0.1},
     (0.85, 3.0)),  # the official order clamps its last step to the max: 0.6, 0.7, 0.8, 0.85
    ({"method.bapo.low_max": 0.85, "method.bapo.low_step": 0.1}, (0.8, 3.0)),  # no clamp
    ({"method.bapo.low_max": 0.6}, (0.6, 1.2)),  # one c_low value: Alg. 1 never moves
    ({"method.bapo.contribution": "value"}, None),  # rho falls as c_low rises: unreadable
])
def test_grid_end_is_the_last_pair_the_search_visits(tmp_path, write_run, changes, end):
    write_run(tmp_path, "bapo", 4, 0, extra_config={**BAPO_GRID, **changes})
    (run,) = load_runs([tmp_path]).runs
    got = grid_end(run)
    assert got == (pytest.approx(end) if end else None)


def test_updates_that_end_at_the_grid_end_below_rho0_are_the_unreachable_ones(tmp_path, write_run):
    write_run(tmp_path, "bapo", 4, 0, extra_config=BAPO_GRID)
    runs = load_runs([tmp_path])
    rid = runs.runs[0].run_id
    # at start; moved and reached; not reached at (0.9, 3.0); not reached at (0.72, 2.05)
    u = pd.DataFrame({"run_id": rid, "bapo_steps": [0, 5, 51, 12],
                      "bapo_reached": [True, True, False, False],
                      "bapo_undefined": False, "c_low": [0.6, 0.6, 0.9, 0.72],
                      "c_high": [1.2, 1.45, 3.0, 2.05], "skipped": False})
    a = annotate(u, runs)
    assert a["outcome"].tolist() == ["at start", "moved, reached", "not reached", "not reached"]
    assert a["at_grid_end"].tolist() == [False, False, True, False]
    r = reach(a)
    # 3 below rho0; 1 proven unreachable -> ceiling 2; reached 1; 1 stopped short
    assert (r.updates, r.below, r.ceiling, r.reached, r.stopped_short) == (4, 3, 2, 1, 1)
    assert r.readable


def test_the_synthetic_warm_start_scores_every_run_alike_at_step_0(tmp_path, write_run):
    # the synthetic writer's step-0 eval is the warm start's: one value for every run
    for seed in range(2):
        write_run(tmp_path, "ppo", 2, seed)
    lines = [json.loads(x) for p in tmp_path.rglob("metrics.jsonl")
             for x in p.read_text().splitlines()]
    step0 = {r["greedy_accuracy"] for r in lines if r["kind"] == "eval" and r["step"] == 0}
    assert len(step0) == 1
