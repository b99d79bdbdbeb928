"""task.reward=random: Bernoulli(p) rewards from (seed, step, response index) alone."""

from __future__ import annotations

import pytest
import torch

from src.config import ConfigError
from src.tasks.rewards import assign_rewards, random_rewards
from tests.conftest import compose
from tests.test_e2e import read_metrics, run_smoke


def test_draws_depend_on_seed_and_step_only():
    a = random_rewards(seed=3, step=7, n=4000, p=0.5)
    assert torch.equal(a, random_rewards(seed=3, step=7, n=4000, p=0.5))
    assert not torch.equal(a, random_rewards(seed=3, step=8, n=4000, p=0.5))
    assert not torch.equal(a, random_rewards(seed=4, step=7, n=4000, p=0.5))
    # response i's draw does not depend on how many responses the step has
    assert torch.equal(random_rewards(3, 7, 100, 0.5), a[:100])
    assert set(a.unique().tolist()) == {0.0, 1.0}


@pytest.mark.parametrize("p", [0.2, 0.5, 0.8])
def test_share_of_ones_is_p(p):
    draws = torch.cat([random_rewards(0, s, 1000, p) for s in range(20)])
    # 20,000 Bernoulli draws: 5 standard errors is at most 0.018
    assert abs(float(draws.mean()) - p) < 5 * (p * (1 - p) / len(draws)) ** 0.5


def test_verifier_source_returns_the_scores_and_random_ignores_them():
    scores = torch.tensor([1.0, 0.0, 1.0, 0.0])
    assert torch.equal(assign_rewards("verifier", scores, seed=0, step=0, p=0.5), scores)
    flipped = assign_rewards("random", 1 - scores, seed=0, step=0, p=0.5)
    assert torch.equal(flipped, assign_rewards("random", scores, seed=0, step=0, p=0.5))


@pytest.mark.parametrize(("overrides", "message"), [
    (["task.reward=coin"], "task.reward must be one of ['verifier', 'random']"),
    (["task.reward=random", "task.reward_p=1.0"], "task.reward_p must be in (0, 1)"),
    (["task.reward=random", "task.reward_p=0"], "task.reward_p must be in (0, 1)"),
])
def test_bad_values_are_config_errors(overrides, message):
    with pytest.raises(ConfigError) as err:
        compose(overrides)
    assert str(err.value).startswith(message)


@pytest.mark.parametrize("task", ["arithmetic", "gsm8k", "math500"])
def test_every_task_accepts_the_option(task):
    cfg = compose([f"task={task}", "task.reward=random", "task.reward_p=0.3"])
    assert (cfg.task.reward, cfg.task.reward_p) == ("random", 0.3)


def test_run_logs_random_reward_and_verifier_accuracy(tmp_path, smoke_overrides):
    run_dir = run_smoke(tmp_path, [*smoke_overrides, "task.reward=random", "train.steps=2",
                                   "eval.every=100"], "coin")
    steps = read_metrics(run_dir)["step"]
    for record in steps:
        expected = float(random_rewards(0, record["step"], 16, 0.5).mean())
        assert record["reward_mean"] == pytest.approx(expected)
    verified = run_smoke(tmp_path, [*smoke_overrides, "train.steps=1", "eval.every=100"], "verifier")
    # the same rollout (same seed and step 0): the verifier's accuracy is logged either way
    assert steps[0]["accuracy"] == read_metrics(verified)["step"][0]["accuracy"]
    assert "reward: random" in (run_dir / "config.yaml").read_text()
