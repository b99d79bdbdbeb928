"""rollout.behaviour=sampler: the decode loop's own log-probs and entropies stand for the
behaviour pass, which then never runs (src/generation.py `Generation.rollout`).

The decode loop's entropy is checked against the trainer's scoring pass on the sampled
tokens (a teacher-forced forward), the refusals where the sampler is not the distribution
the trainer scores, and a whole run: no behaviour forward, and the stored behaviour numbers
are the sampler's own."""

from __future__ import annotations

import math

import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch

import src.policy as policy_module
from src.config import ConfigError
from src.models.decoding import decode
from src.policy import response_logprobs
from src.rollout import Rollout
from tests.conftest import compose
from tests.test_e2e import read_metrics, run_smoke
from tests.tiny_policy import tiny_model, tiny_rollout

EOS, PAD, MAX_NEW = 3, 0, 12


def _decode(model, prompt, temperature, with_entropy):
    return decode(model, prompt.prompt_ids, prompt.prompt_mask, max_new_tokens=MAX_NEW,
                  eos_token_id=EOS, pad_token_id=PAD, temperature=temperature,
                  generator=torch.Generator().manual_seed(7), with_entropy=with_entropy)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_decode_loops_entropy_is_the_scoring_passes(temperature):
    model, prompt = tiny_model().eval(), tiny_rollout()
    with torch.no_grad():
        plain = _decode(model, prompt, temperature, with_entropy=False)
        out = _decode(model, prompt, temperature, with_entropy=True)
    # Asking for the entropy changes no draw and no log-prob.
    assert plain.entropy is None
    assert torch.equal(plain.tokens, out.tokens) and torch.equal(plain.logp, out.logp)
    assert torch.equal(plain.lengths, out.lengths)
    mask = torch.arange(MAX_NEW)[None, :] < out.lengths[:, None]
    assert len(set(out.lengths.tolist())) >= 3  # rows end at several steps
    # The trainer's pass over the same tokens: one forward of prompt + response.
    rollout = Rollout(prompt.prompt_ids, prompt.prompt_mask, out.tokens, mask, out.logp,
                      [""] * len(mask), prompt.group_ids)
    with torch.no_grad():
        logp, entropy = response_logprobs(model, rollout, temperature=temperature)
    torch.testing.assert_close(out.entropy[mask], entropy[mask], atol=2e-5, rtol=0)
    torch.testing.assert_close(out.logp[mask], logp[mask], atol=2e-5, rtol=0)
    assert (out.entropy[~mask] == 0).all()
    assert (out.entropy[mask] > 0).all()


@pytest.mark.parametrize(("override", "says"), [
    ("rollout.precision=int8", "must be the trainer's own fp32 weights"),
    ("rollout.top_p=0.9", "use rollout.top_p=1.0"),
    ("correction=tis", "a mismatch correction would correct nothing"),
    ("offpolicy.source=partial", "offpolicy.source=partial builds responses across policy versions"),
    ("rollout.behaviour=trainer", "must be one of"),
])
def test_a_sampler_that_is_not_the_trainers_distribution_is_refused(smoke_overrides, override, says):
    behaviour = [] if override.startswith("rollout.behaviour") else ["rollout.behaviour=sampler"]
    extra = ["offpolicy.token_budget=16"] if "partial" in override else []
    with pytest.raises(ConfigError, match="rollout.behaviour") as refused:
        compose([*smoke_overrides, *behaviour, override, *extra])
    assert says in str(refused.value)


def test_vllm_is_refused(smoke_overrides):
    with pytest.raises(ConfigError, match="the vllm backend keeps no entropies"):
        compose([*smoke_overrides, "rollout.behaviour=sampler", "rollout=vllm"])


def _counted_run(tmp_path, monkeypatch, overrides, name):
    """A run dir and how many scoring passes ran without grad (behaviour passes)."""
    real, calls = policy_module.response_logprobs, []

    def counted(model, batch, **kw):
        calls.append(torch.is_grad_enabled())
        return real(model, batch, **kw)

    monkeypatch.setattr(policy_module, "response_logprobs", counted)
    run_dir = run_smoke(tmp_path, overrides, name)
    monkeypatch.setattr(policy_module, "response_logprobs", real)
    return run_dir, calls.count(False), calls.count(True)


def test_a_sampler_behaviour_run_runs_no_behaviour_pass(tmp_path, monkeypatch, smoke_overrides):
    four = [*smoke_overrides, "method=ppo", "train.staleness=4", "train.steps=2", "eval.every=100"]
    scored, scored_passes, scored_updates = _counted_run(tmp_path, monkeypatch, four, "scored")
    sampled, sampler_passes, sampler_updates = _counted_run(
        tmp_path, monkeypatch, [*four, "rollout.behaviour=sampler"], "sampler")
    # Scored: mini-batches 1-3 of each of the 2 steps get a no-grad pass; mini-batch 0's runs
    # with grad and is update 0's. Sampler: no pass at all, update 0 runs its own forward.
    assert (scored_passes, scored_updates) == (2 * 3, 2 * 4)
    assert (sampler_passes, sampler_updates) == (0, 2 * 4)
    tokens = pd.concat(pq.read_table(p).to_pandas() for p in (sampled / "tokens").glob("*.parquet"))
    assert len(tokens) > 0 and (tokens["logp_behavior"] == tokens["logp_sampler"]).all()
    steps = read_metrics(sampled)["step"]
    assert all(s["sampler_logp_gap"] is None and s["entropy_mean"] > 0 for s in steps)
    assert all(s["sampler_logp_gap"] is not None for s in read_metrics(scored)["step"])
    # Update 0 is on-policy up to the kernels' rounding: its ratio is 1 within 1e-4.
    first = read_metrics(sampled)["update"][0]
    assert first["update"] == 0 and math.isclose(first["ratio_mean"], 1.0, abs_tol=1e-4)
