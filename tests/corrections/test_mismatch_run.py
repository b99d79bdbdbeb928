"""A run with a low-precision sampler and a correction: its diagnostics are logged per
update and per step, its token rows carry the weight and the rejection, an update whose
tokens were all rejected is skipped without counting as a fault, and a SIGKILL then the
same command resumes to the uninterrupted run's numbers."""

from __future__ import annotations

import json
import subprocess

import pyarrow.parquet as pq
import pytest
import torch

from src.minibatches import MiniBatch
from src.trainer import Trainer
from src.update import NO_LOSS_TOKENS
from tests.conftest import REPO, compose, token_rows
from tests.test_e2e import read_metrics
from tests.test_reliability import _cli, _strip_times, kill_after_checkpoint
from tests.tiny_policy import B, tiny_model, tiny_rollout

# int8 sampler, token TIS at 2.0, and a rejection tight enough to drop some tokens
MISMATCH = ["rollout.precision=int8", "correction=tis", "correction.rollout_rs=token_k3",
            "correction.rollout_rs_threshold=1e-5"]
DIAGNOSTICS = ("rollout_corr_kl", "rollout_corr_k3_kl", "rollout_corr_training_ppl",
               "rollout_corr_rollout_ppl", "rollout_corr_log_ppl_diff", "rollout_corr_ppl_ratio",
               "rollout_corr_chi2_token", "rollout_corr_chi2_seq", "rollout_corr_rollout_is_mean",
               "rollout_corr_rollout_is_std", "rollout_corr_rollout_is_min",
               "rollout_corr_rollout_is_max", "rollout_corr_rollout_is_eff_sample_size",
               "rollout_corr_rollout_is_ratio_fraction_high", "rollout_corr_rollout_rs_masked_fraction")


@pytest.mark.slow
def test_mismatch_run_logs_its_diagnostics_and_resumes_identically(tmp_path, smoke_overrides):
    overrides = [*smoke_overrides, *MISMATCH, "method=bapo", "train.steps=4", "checkpoint.every=1",
                 "eval.every=4"]
    reference = tmp_path / "reference"
    done = subprocess.run(_cli(overrides, reference), cwd=REPO, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    metrics = read_metrics(reference)
    for record in metrics["update"]:
        assert set(DIAGNOSTICS) <= record.keys()
        assert record["rollout_corr_k3_kl"] > 0 and 0 < record["rollout_corr_rollout_rs_masked_fraction"] < 1
    assert all(r["rollout_corr_k3_kl"] > 0 for r in metrics["step"])
    tokens = pq.read_table(sorted((reference / "tokens").glob("*.parquet"))[0]).to_pandas()
    assert tokens["is_weight"].between(0, 2.0).all() and (tokens["is_weight"] != 1).any()
    assert (~tokens["rs_keep"]).any() and tokens["rs_keep"].any()
    assert not tokens.loc[~tokens["rs_keep"], "in_loss"].any()  # a rejected token has no loss

    crashed = tmp_path / "crashed"
    kill_after_checkpoint(overrides, crashed, step=2)
    resumed = subprocess.run(_cli(overrides, crashed), cwd=REPO, capture_output=True, text=True,
                             timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming" in resumed.stdout
    again = read_metrics(crashed)
    for kind in ("update", "step", "eval"):
        assert _strip_times(metrics[kind]) == _strip_times(again[kind]), kind
    assert token_rows(reference) == token_rows(crashed)
    assert json.loads((crashed / "status.json").read_text())["status"] == "finished"


def test_an_update_with_every_token_rejected_is_skipped_without_a_step():
    model = tiny_model()
    cfg = compose(["train.prompts_per_step=2", "train.group_size=4", "rollout.max_new_tokens=12"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = Trainer(cfg, model, None, None, None, optimizer, None, None, None)
    data = tiny_rollout()
    logp = torch.zeros(data.response_ids.shape)
    mb = MiniBatch(torch.arange(B), data, logp, logp, torch.ones(B), torch.zeros(B),
                   loss_keep=torch.zeros(data.response_ids.shape, dtype=torch.bool))
    before = [p.detach().clone() for p in model.parameters()]
    record, out, _, _ = trainer.update(mb, 0)
    assert record["skipped"] and record["skip_reason"] == NO_LOSS_TOKENS and out is None
    assert "rollout_corr_k3_kl" in record  # the mismatch is still measured
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
