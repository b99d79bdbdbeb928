"""TRL plug: the project's objectives inside TRL's GRPOTrainer, on CPU with a tiny model.

- ppo / clip_higher through the plug give TRL's own loss (and gradients) on the same batch,
  for each aggregation and its TRL `loss_type` twin;
- all four methods train a few steps with staleness k=2 and write a run dir that
  `analysis/` reads.
"""

from __future__ import annotations

import json
import warnings

import pytest

pytest.importorskip("trl")
pytestmark = pytest.mark.trl

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from src.algorithms import CLIP_STATES, METHODS  # noqa: E402
from src.integrations.trl_grpo import ProjectGRPOTrainer, trl_knobs, trl_staleness  # noqa: E402
from src.models.tiny import build_tiny_model  # noqa: E402
from src.models.tokenizer import train_tokenizer  # noqa: E402

CORPUS = [f"{a}+{b}={a + b}" for a in range(30) for b in range(30)]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(CORPUS, 300)


@pytest.fixture(scope="module")
def dataset():
    return Dataset.from_list([{"prompt": f"{a}+{a + 1}="} for a in range(64)])


def tiny_model(tokenizer, seed=0):
    return build_tiny_model(tokenizer, hidden_size=64, num_layers=2, num_heads=2,
                            max_position_embeddings=64, seed=seed)


def digit_reward(completions, **_):
    # Varied rewards from a random model: share of digits in the completion.
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]


def grpo_args(tmp_path, **kw):
    base = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4,
                num_generations=4, max_completion_length=6, learning_rate=1e-3,
                report_to="none", logging_steps=1, save_strategy="no", use_cpu=True,
                seed=0, disable_tqdm=True, dataloader_num_workers=0)
    base.update(kw)
    return GRPOConfig(**base)


def make_batch(trainer, model, tokenizer, seed=0, b=6, p=4, t=7):
    g = torch.Generator().manual_seed(seed)
    vocab = len(tokenizer)
    prompt_ids = torch.randint(3, vocab, (b, p), generator=g)
    prompt_mask = torch.ones(b, p, dtype=torch.long)
    prompt_mask[0, 0] = 0  # left padding
    completion_ids = torch.randint(3, vocab, (b, t), generator=g)
    completion_mask = torch.ones(b, t, dtype=torch.long)
    completion_mask[1, 4:] = 0
    completion_mask[3, 2:] = 0
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            model, torch.cat([prompt_ids, completion_ids], 1),
            torch.cat([prompt_mask, completion_mask], 1), t)
    # Stale behaviour log-probs: ratios spread well past [0.8, 1.28] both ways.
    old = logps + 0.4 * torch.randn(b, t, generator=g)
    return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask,
            "completion_ids": completion_ids, "completion_mask": completion_mask,
            "advantages": torch.randn(b, generator=g), "old_per_token_logps": old,
            "num_items_in_batch": completion_mask.sum()}


def loss_and_grads(fn, trainer, model, inputs):
    model.zero_grad(set_to_none=True)
    trainer.current_gradient_accumulation_steps = 1
    loss = fn(trainer, model, inputs)
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return loss.detach(), grads


@pytest.mark.parametrize(("method", "eps_high", "aggregation", "loss_type"), [
    ("ppo", 0.2, "token-mean", "dapo"),
    ("clip_higher", 0.28, "token-mean", "dapo"),
    ("ppo", 0.2, "token-mean", "bnpo"),
    ("clip_higher", 0.28, "seq-mean-token-mean", "grpo"),
    ("ppo", 0.2, "seq-mean-token-sum-norm", "dr_grpo"),
])
def test_loss_equals_trl_loss(tmp_path, tokenizer, dataset, method, eps_high, aggregation,
                              loss_type):
    model = tiny_model(tokenizer)
    model.train()
    common = dict(steps_per_generation=1, max_completion_length=7)
    trl = GRPOTrainer(model=model, reward_funcs=digit_reward, train_dataset=dataset,
                      processing_class=tokenizer,
                      args=grpo_args(tmp_path, loss_type=loss_type, epsilon=0.2,
                                     epsilon_high=eps_high, **common))
    ours = ProjectGRPOTrainer(model=model, reward_funcs=digit_reward, train_dataset=dataset,
                              processing_class=tokenizer, method=method,
                              method_overrides={"aggregation": aggregation},
                              args=grpo_args(tmp_path, loss_type="dapo", **common))
    inputs = make_batch(ours, model, tokenizer)
    ref_loss, ref_grad = loss_and_grads(GRPOTrainer._compute_loss, trl, model, inputs)
    our_loss, our_grad = loss_and_grads(ProjectGRPOTrainer._compute_loss, ours, model, inputs)
    print(f"{method:12s} {aggregation:24s} vs TRL {loss_type:8s}: loss TRL={ref_loss.item():+.9f} "
          f"ours={our_loss.item():+.9f} |dloss|={abs(ref_loss - our_loss).item():.2e} "
          f"max|dgrad|={(ref_grad - our_grad).abs().max().item():.2e}")
    # The batch really exercises clipping on both sides.
    clip = ours._metrics["train"]
    assert clip["clip_ratio/low_mean"][-1] > 0 and clip["clip_ratio/high_mean"][-1] > 0
    torch.testing.assert_close(our_loss, ref_loss, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(our_grad, ref_grad, rtol=1e-5, atol=1e-7)
    # TRL's own clip metrics agree with the project's sign-aware clip states.
    for name in ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"):
        assert trl._metrics["train"][name][-1] == pytest.approx(clip[name][-1], abs=1e-6)


@pytest.mark.parametrize("seed", [0, 1])
def test_sapo_through_the_plug_equals_trls_sapo(tmp_path, tokenizer, dataset, seed):
    """A method added to the registry reaches TRL through the plug with no code of its own:
    method="sapo" (its yaml: seq-mean-token-mean) gives TRL's own loss_type="sapo" (the
    same gate, tau 1.0 / 1.05) on the same batch, loss and gradients. TRL does not clamp
    log r as verl does; the batch's |log r| is far below 20."""
    model = tiny_model(tokenizer)
    model.train()
    common = dict(steps_per_generation=1, max_completion_length=7)
    trl = GRPOTrainer(model=model, reward_funcs=digit_reward, train_dataset=dataset,
                      processing_class=tokenizer, args=grpo_args(tmp_path, loss_type="sapo", **common))
    ours = ProjectGRPOTrainer(model=model, reward_funcs=digit_reward, train_dataset=dataset,
                              processing_class=tokenizer, method="sapo",
                              args=grpo_args(tmp_path, loss_type="dapo", **common))
    assert ours.objective.aggregation == "seq-mean-token-mean"
    inputs = make_batch(ours, model, tokenizer, seed=seed)
    inputs["old_per_token_logps"] = inputs["old_per_token_logps"] + 1.5 * torch.randn(
        inputs["old_per_token_logps"].shape, generator=torch.Generator().manual_seed(seed))
    ref_loss, ref_grad = loss_and_grads(GRPOTrainer._compute_loss, trl, model, inputs)
    our_loss, our_grad = loss_and_grads(ProjectGRPOTrainer._compute_loss, ours, model, inputs)
    torch.testing.assert_close(our_loss, ref_loss, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(our_grad, ref_grad, rtol=1e-5, atol=1e-7)
    assert ref_loss.abs().item() > 0 and ref_grad.abs().max().item() > 0


def test_staleness_knobs(tmp_path):
    args = grpo_args(tmp_path, **trl_knobs(4, epochs=2, gradient_accumulation_steps=2))
    assert (args.steps_per_generation, args.num_iterations) == (8, 2)
    assert args.generation_batch_size == 4 * 1 * 8
    assert trl_staleness(args) == (4, 2)
    with pytest.raises(ValueError, match="multiple of gradient_accumulation_steps"):
        trl_staleness(grpo_args(tmp_path, steps_per_generation=3, gradient_accumulation_steps=2))


@pytest.mark.parametrize(("knob", "value"), [("beta", 0.04), ("top_entropy_quantile", 0.2),
                                             ("loss_type", "cispo"), ("delta", 1.5)])
def test_incompatible_trl_knobs_fail_by_name(tmp_path, tokenizer, dataset, knob, value):
    with pytest.raises(ValueError, match=f"GRPOConfig.{knob}"):
        ProjectGRPOTrainer(model=tiny_model(tokenizer), reward_funcs=digit_reward,
                           train_dataset=dataset, processing_class=tokenizer, method="ppo",
                           args=grpo_args(tmp_path, **{knob: value}))


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(METHODS))  # every registered method
def test_trains_and_writes_run_dir(tmp_path, tokenizer, dataset, method):
    import pyarrow.parquet as pq

    from analysis.core.loader import load_runs

    torch.manual_seed(0)
    model = tiny_model(tokenizer)
    run_dir = tmp_path / "runs" / "trl_2x" / method / "seed0"
    evals = []

    def eval_fn(step):
        evals.append(step)
        return {"greedy_accuracy": 0.0, "sampled_accuracy": 0.0, "n_problems": 0}

    # k = steps_per_generation / gas = 2 updates per rollout of 8 responses; 2 rollouts.
    args = grpo_args(tmp_path, max_steps=4, **trl_knobs(2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = ProjectGRPOTrainer(model=model, reward_funcs=digit_reward, args=args,
                                     train_dataset=dataset, processing_class=tokenizer,
                                     method=method, run_dir=run_dir, experiment="trl_2x",
                                     eval_fn=eval_fn, eval_every=1)
        trainer.train()

    assert json.loads((run_dir / "status.json").read_text())["status"] == "finished"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    updates = [r for r in records if r["kind"] == "update"]
    steps = [r for r in records if r["kind"] == "step"]
    assert [(u["step"], u["update"], u["policy_lag"]) for u in updates] == [
        (0, 0, 0), (0, 1, 1), (1, 0, 0), (1, 1, 1)]
    assert [s["step"] for s in steps] == [0, 1]
    assert evals == [0, 1, 2]
    # Update 0 of each rollout is on-policy: TRL recomputed logp_b with the trainer's model.
    assert updates[0]["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert updates[0]["clip_frac"] == 0.0
    assert all(u["grad_norm"] is not None and u["grad_norm"] >= 0 for u in updates)
    for s in steps:
        assert s["num_groups"] == 2 and 0.0 <= s["reward_mean"] <= 1.0
        # The step's time spans its rollout and its updates, which come one after another.
        assert s["time_step_s"] >= s["time_rollout_s"] + s["time_update_s"] > 0
    if method == "bapo":
        assert all(u["rho"] is None or u["rho"] >= 0 for u in updates)
        assert all(0.6 <= u["c_low"] <= 0.9 and 1.2 <= u["c_high"] <= 3.0 for u in updates)
    tokens = pq.read_table(run_dir / "tokens" / "step_000001.parquet").to_pandas()
    assert set(tokens["clip_state"]) <= set(CLIP_STATES)
    assert set(tokens["update"]) == {0, 1}
    assert tokens["response_id"].nunique() == 8  # each response once per pass
    assert set(tokens["group_id"]) == {0, 1}
    if method == "top_entropy":
        per_update = tokens.groupby("update")["in_loss"].agg(["sum", "count"])
        assert (per_update["sum"] < per_update["count"]).all()
    else:
        assert tokens["in_loss"].all()

    runs = load_runs([tmp_path / "runs"])
    assert [(r.method, r.staleness, r.experiment) for r in runs.runs] == [(method, 2, "trl_2x")]
    assert len(runs.steps) == 2 and len(runs.updates) == 4
    assert not runs.skipped
