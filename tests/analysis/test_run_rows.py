"""analysis/reports/run_rows.py: one README table row per run, on a run dir with numbers chosen so
that every column can be worked out by hand."""

from __future__ import annotations

import json

import pytest

from analysis.reports.run_rows import main, markdown, row


def _run_dir(tmp_path, *, with_updates=True):
    run = tmp_path / "seed3"
    run.mkdir()
    evals = [(0.1, 0.3), (0.2, 0.3), (0.4, 0.5), (0.6, 0.5), (0.8, 0.8)]  # (sampled, greedy)
    recs = [{"kind": "eval", "step": i, "sampled_accuracy": s, "greedy_accuracy": g}
            for i, (s, g) in enumerate(evals)]
    recs += [{"kind": "step", "step": i, "entropy_mean": e}
             for i, e in enumerate([2.0, 1.0, 1.0, 0.5, 0.5, 0.25, 0.75, 0.5])]
    updates = [(10, 0.1, 0.6, 1.2), (30, 0.0, 0.9, 3.0), (60, 0.05, 0.6, 1.2)]
    if with_updates:
        recs += [{"kind": "update", "tokens_in_loss": t, "clip_frac": c, "c_low": lo,
                  "c_high": hi, "skipped": False} for t, c, lo, hi in updates]
        # a skipped update took no step: its clip fraction is not the run's
        recs.append({"kind": "update", "tokens_in_loss": 100, "clip_frac": 1.0, "c_low": 0.8,
                     "c_high": 1.2, "skipped": True})
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    (run / "meta.json").write_text(json.dumps({"method": "bapo", "seed": 3, "wall_time_s": 1800}))
    return run


def test_each_column_is_worked_out_by_hand(tmp_path):
    r = row(_run_dir(tmp_path))
    # final: the mean of the last three evals, (0.4 + 0.6 + 0.8) / 3 and (0.5 + 0.5 + 0.8) / 3
    assert r["sampled"] == pytest.approx((0.1, 0.6))
    assert r["greedy"] == pytest.approx((0.3, 0.6))
    # clip weighted by loss tokens over the steps taken: (10*0.1 + 30*0 + 60*0.05) / 100
    assert r["clip"] == pytest.approx(0.04)
    # entropy: the first step's, then the last five steps' mean (0.5+0.5+0.25+0.75+0.5)/5
    assert r["entropy"] == pytest.approx((2.0, 0.5))
    assert r["bounds"] == [((0.6, 1.2), 2), ((0.9, 3.0), 1)]
    assert r["minutes"] == 30.0
    assert markdown(r) == ("| bapo | 3 | 0.100 -> 0.600 | 0.300 -> 0.600 | 4.00% | 2.00 -> 0.50 | "
                           "[0.6, 1.2] (2), [0.9, 3.0] (1) | 30.0 |")


def test_a_dir_that_is_not_a_run_or_has_no_updates_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="no metrics.jsonl"):
        main([str(tmp_path)])
    with pytest.raises(SystemExit, match=r"has 5, 8, 0"):
        row(_run_dir(tmp_path, with_updates=False))
