"""The three staleness modes: how k updates are made from one rollout.

minibatch: k mini-batches of P*G/k; fixed_update: a rollout of k*P*G responses in k
mini-batches of P*G (each update as large as a 1x update); epochs: k full-batch updates.
"""

from __future__ import annotations

import pandas as pd
import pyarrow.parquet as pq
import pytest

from src.config import ConfigError
from src.schedule import minibatch_size, rollout_prompts, updates_per_rollout
from tests.conftest import compose
from tests.test_e2e import read_metrics, run_smoke

# smoke: 4 prompts x 4 samples per rollout step
COMMON = ["train.steps=3", "train.staleness=4", "eval.every=100", "method=ppo"]


def tokens_of(run_dir) -> pd.DataFrame:
    return pd.concat(pq.read_table(p).to_pandas() for p in sorted((run_dir / "tokens").glob("*.parquet")))


@pytest.mark.parametrize(("mode", "prompts", "mini", "updates"), [
    ("minibatch", 16, 16 * 8 // 4, 4),
    ("fixed_update", 64, 16 * 8, 4),
    ("epochs", 16, 16 * 8, 4),
])
def test_mode_sizes_follow_their_definition(mode, prompts, mini, updates):
    cfg = compose(["train.staleness=4", f"train.staleness_mode={mode}"]).train
    assert (rollout_prompts(cfg), minibatch_size(cfg), updates_per_rollout(cfg)) == (prompts, mini, updates)


def test_minibatch_mode_with_epochs_factor_repeats_the_pass():
    cfg = compose(["train.staleness=2", "train.epochs=3"]).train
    assert (minibatch_size(cfg), updates_per_rollout(cfg)) == (64, 6)


def test_fixed_update_needs_no_divisibility_but_minibatch_does():
    compose(["train.staleness=3", "train.staleness_mode=fixed_update"])  # 3 * 128 rows, 3 x 128
    with pytest.raises(ConfigError, match="train.staleness"):
        compose(["train.staleness=3"])


def test_epochs_mode_rejects_a_second_epochs_factor():
    with pytest.raises(ConfigError, match="train.epochs must be 1 with train.staleness_mode=epochs"):
        compose(["train.staleness=2", "train.staleness_mode=epochs", "train.epochs=2"])


def test_unknown_mode_is_a_config_error():
    with pytest.raises(ConfigError, match="train.staleness_mode must be one of"):
        compose(["train.staleness_mode=sliding"])


def test_fixed_update_mode_rollout_grows_and_updates_keep_1x_size(tmp_path, smoke_overrides):
    run_dir = run_smoke(tmp_path, [*smoke_overrides, *COMMON, "train.staleness_mode=fixed_update"],
                        "fixed")
    tokens = tokens_of(run_dir)
    # 4 x 4 prompts x 4 samples = 64 responses per rollout, 16 in each of the 4 updates
    per_update = tokens.groupby(["step", "update"])["response_id"].nunique()
    assert (per_update == 16).all() and len(per_update) == 3 * 4
    assert (tokens.groupby("step")["response_id"].nunique() == 64).all()
    # each response is trained on exactly once per rollout, by one of the k updates
    assert (tokens.groupby(["step", "response_id"])["update"].nunique() == 1).all()
    updates = pd.DataFrame(read_metrics(run_dir)["update"])
    assert updates.groupby("step")["policy_lag"].apply(list).tolist() == [[0, 1, 2, 3]] * 3
    assert (tokens.loc[tokens["update"] == 0, "ratio"] == 1.0).all()


def test_epochs_mode_trains_k_times_on_the_whole_rollout(tmp_path, smoke_overrides):
    run_dir = run_smoke(tmp_path, [*smoke_overrides, *COMMON, "train.staleness_mode=epochs"],
                        "epochs")
    tokens = tokens_of(run_dir)
    # one rollout of 16 responses, and each of the 4 updates sees all 16
    assert (tokens.groupby(["step", "update"])["response_id"].nunique() == 16).all()
    assert (tokens.groupby("step")["update"].nunique() == 4).all()
    first = tokens[tokens["update"] == 0]
    assert (first["ratio"] == 1.0).all()
    # every update of a step scores the very same tokens
    keys = tokens.groupby(["step", "update"]).apply(
        lambda t: tuple(sorted(zip(t["response_id"], t["position"], strict=True))))
    assert (keys.groupby(level="step").nunique() == 1).all()
    updates = pd.DataFrame(read_metrics(run_dir)["update"])
    lag = updates.groupby("update")["abs_log_ratio_mean"].mean()
    assert lag.loc[0] == 0.0 and lag.loc[3] > lag.loc[1] > 0



def test_a_groups_split_draws_whole_groups_with_the_same_seed_each_time():
    import torch

    from src.schedule.split import split_rows

    groups = torch.arange(8).repeat_interleave(4)  # 8 groups of 4 responses, in order
    parts = split_rows(32, 4, seed=3, groups=groups)
    assert len(parts) == 4 and sorted(torch.cat(parts).tolist()) == list(range(32))
    for rows in parts:
        held = groups[rows].unique()
        assert held.numel() == 2  # two whole groups each
        assert sorted(rows.tolist()) == sorted(torch.isin(groups, held).nonzero()[:, 0].tolist())
    again = split_rows(32, 4, seed=3, groups=groups)
    assert all(torch.equal(a, b) for a, b in zip(parts, again, strict=True))
    # the responses split cuts groups (with this seed some mini-batch holds a partial group)
    cut = split_rows(32, 4, seed=3)
    assert any(groups[rows].bincount(minlength=8)[groups[rows].unique()].min() < 4 for rows in cut)


def test_a_groups_split_needs_whole_groups_per_mini_batch():
    import pytest

    from src.config_fields import ConfigError
    from tests.conftest import compose

    assert compose(["experiment=staleness_4x", "train.minibatch_split=groups"]).train.minibatch_split == "groups"
    with pytest.raises(ConfigError, match=r"^train.minibatch_split must be responses when train.staleness=3 "
                                          r"does not divide train.prompts_per_step=16"):
        compose(["train.staleness=3", "train.prompts_per_step=16", "train.group_size=6",
                 "train.minibatch_split=groups"])
