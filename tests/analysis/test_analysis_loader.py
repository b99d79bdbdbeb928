"""Loader: tidy frames with run identity, and broken runs reported, not fatal."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from analysis.core.loader import RUN_COLS, load_runs


def test_identity_and_frames_match_what_was_written(sweep, runset):
    _, written = sweep
    assert len(runset.runs) == len(written) and not runset.skipped
    table = runset.table
    assert set(map(tuple, table[["method", "staleness", "seed"]].to_numpy())) == set(written)
    assert (table["status"] == "finished").all() and (table["experiment"] == "sweep").all()

    syn = written[("bapo", 4, 1)]
    rid = table.loc[
        (table["method"] == "bapo") & (table["staleness"] == 4) & (table["seed"] == 1), "run_id"
    ].item()
    steps = runset.steps[runset.steps["run_id"] == rid]
    exp = pd.DataFrame(syn.steps)
    assert list(steps.columns[: len(RUN_COLS)]) == RUN_COLS
    np.testing.assert_allclose(steps["reward_mean"], exp["reward_mean"])
    np.testing.assert_allclose(steps["c_high"], exp["c_high"])
    ups = runset.updates[runset.updates["run_id"] == rid]
    assert len(ups) == len(syn.updates) == 4 * 4  # 4 steps x 4 updates
    np.testing.assert_allclose(ups["grad_norm"], pd.DataFrame(syn.updates)["grad_norm"])
    evals = runset.evals[runset.evals["run_id"] == rid]
    assert evals["step"].tolist() == [e["step"] for e in syn.evals]


def test_tokens_reads_only_asked_columns_with_identity(sweep, runset):
    _, written = sweep
    run = next(r for r in runset.runs if (r.method, r.staleness, r.seed) == ("ppo", 2, 0))
    tok = runset.tokens(["ratio", "clip_state"], [run])
    assert set(tok.columns) == {"ratio", "clip_state", *RUN_COLS}
    exp = written[("ppo", 2, 0)].tokens
    np.testing.assert_allclose(tok["ratio"], exp["ratio"].astype("float32"))
    assert (tok["clip_state"].astype(str).to_numpy() == exp["clip_state"].to_numpy()).all()
    assert (tok["method"] == "ppo").all() and (tok["staleness"] == 2).all()
    sampled = runset.tokens(["ratio"], [run], sample=10)
    assert len(sampled) == 10 and sampled["ratio"].isin(tok["ratio"]).all()


@pytest.mark.parametrize("status", ["running", "failed"])
def test_crashed_run_is_used_up_to_its_last_complete_step(tmp_path, write_run, status):
    # truncated last JSONL line, step 3 with update records and a token part but no step
    # record (steps are 0-based, as src/trainer.py writes them).
    syn = write_run(tmp_path, "ppo", 2, 0, steps=3, status=status, crash=True)
    assert (syn.path / "tokens" / "step_000003.parquet").exists()
    rs = load_runs([tmp_path])
    (run,) = rs.runs
    assert run.complete_steps == [0, 1, 2] and run.status == status
    assert rs.steps["step"].max() == 2
    assert rs.updates["step"].max() == 2 and len(rs.updates) == len(syn.updates)
    assert rs.tokens(["step"])["step"].max() == 2
    assert rs.evals["step"].tolist() == [0, 2, 3]  # eval.step counts completed steps
    text = "\n".join(rs.messages)
    assert "truncated last line dropped" in text
    assert "dropped 2 update records of incomplete step(s) [3]" in text
    assert f"status {status}: used up to its last complete step 2" in text
    assert "dropped 1 token part(s) of incomplete steps" in text


def test_update_rows_of_a_step_without_step_record_are_dropped(tmp_path, write_run):
    # A finished status does not excuse a missing step record.
    syn = write_run(tmp_path, "ppo", 2, 0, steps=2)
    lines = (syn.path / "metrics.jsonl").read_text().splitlines()
    lines.append(json.dumps({**syn.updates[0], "step": 2}))
    (syn.path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    rs = load_runs([tmp_path])
    assert rs.updates["step"].max() == 1
    assert any("incomplete step(s) [2]" in m for m in rs.messages)


def test_corrupt_parquet_part_is_skipped_with_a_message(tmp_path, write_run):
    write_run(tmp_path, "ppo", 2, 0, steps=3)
    good = write_run(tmp_path, "bapo", 2, 0, steps=3)
    bad = tmp_path / "sweep_2x" / "ppo" / "seed0" / "tokens" / "step_000002.parquet"
    bad.write_bytes(b"PAR1 this is not parquet")
    rs = load_runs([tmp_path])
    tok = rs.tokens(["step", "logp"])
    ppo = tok[tok["method"] == "ppo"]
    assert sorted(ppo["step"].unique()) == [0, 1]
    assert len(tok[tok["method"] == "bapo"]) == len(good.tokens)
    assert any("unreadable token part step_000002.parquet skipped" in m for m in rs.messages)
    # The bad part is remembered: a second read neither fails nor repeats the message.
    rs.tokens(["step"])
    assert sum("step_000002" in m for m in rs.messages) == 1


def test_run_dir_without_config_is_skipped_others_load(tmp_path, write_run):
    write_run(tmp_path, "ppo", 2, 0)
    broken = write_run(tmp_path, "bapo", 2, 0)
    (broken.path / "config.yaml").unlink()
    rs = load_runs([tmp_path])
    assert [r.method for r in rs.runs] == ["ppo"]
    assert rs.skipped == [(str(broken.path), "missing config.yaml")]
    assert any("missing config.yaml" in m for m in rs.messages)


def test_no_step_record_missing_root_and_duplicates(tmp_path, write_run):
    a, b = tmp_path / "a", tmp_path / "b"
    write_run(a, "ppo", 2, 0, steps=2)
    empty = write_run(a, "bapo", 2, 0, steps=2)
    (empty.path / "metrics.jsonl").write_text("")
    shutil.copytree(a / "sweep_2x" / "ppo", b / "copy" / "ppo")  # same run reached twice
    rs = load_runs([a, b, tmp_path / "nope"])
    assert len(rs.runs) == 1
    reasons = dict(rs.skipped)
    assert "no complete step" in reasons[str(empty.path)]
    assert any("duplicate of" in why for why in reasons.values())
    assert any("not a directory" in m for m in rs.messages)
