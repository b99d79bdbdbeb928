"""Off-policy sources and ratio anchors (src/schedule/), checked by hand and against the
weights that generated each token."""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pytest
import torch

from src.algorithms import build_method
from src.algorithms.drift import drift_metrics, ratio_histogram
from src.config import ConfigError
from src.policy import response_logprobs
from src.run_vocab import RATIO_BIN_EDGES
from src.schedule import StoredRollout, behaviour_weight, capped_share, split_rows
from src.schedule.sources.delay import Delay
from src.schedule.sources.replay import Replay
from src.seeds import step_seed
from tests.conftest import compose
from tests.offpolicy_harness import FakeBackend, make_trainer, run_steps
from tests.tiny_policy import tiny_model

K_UPDATES = 2  # train.staleness in the harness


def _rollout_of(trainer, slot: int):
    """The rollout the fake engine gives for `slot`: its 2 prompts and the slot's seed."""
    return FakeBackend().generate(["a", "b"], num_samples=4, max_new_tokens=10, temperature=1.0,
                                  top_p=1.0, seed=step_seed(trainer.cfg.seed, slot))


# -- the delay queue ---------------------------------------------------------------------


def test_delay_trains_on_the_rollout_of_k_steps_earlier_with_its_generators_logprobs(tmp_path):
    delay, steps = 2, 5
    trainer, writer = make_trainer(["offpolicy.source=delay", f"offpolicy.delay={delay}"], tmp_path)
    _, starts = run_steps(trainer, steps)
    model = tiny_model()
    for step in range(steps):
        generated_at = max(0, step - delay)  # slots 0..K-1 come from the initial weights
        roll = _rollout_of(trainer, step)
        model.load_state_dict(starts[generated_at])
        with torch.no_grad():
            expected_logp, _ = response_logprobs(model, roll)
        rows = writer.tokens[step]
        # the rows are the slot's own tokens: the queue handed over the rollout of this step
        ids = roll.response_ids[rows["response_id"], rows["position"]].numpy()
        assert np.array_equal(rows["token_id"], ids)
        want = expected_logp[rows["response_id"], rows["position"]].numpy()
        np.testing.assert_allclose(rows["logp_behavior"], want, rtol=0, atol=2e-5)
        version = generated_at * K_UPDATES
        assert set(rows["policy_version"].tolist()) == {version}
        assert np.array_equal(rows["lag"], step * K_UPDATES + rows["update"] - version)
    lags = [(u["step"], u["update"], u["policy_lag"], u["policy_lag_max"]) for u in writer.updates]
    assert lags == [(s, j, float(s * 2 + j - max(0, s - delay) * 2), s * 2 + j - max(0, s - delay) * 2)
                    for s in range(steps) for j in range(2)]
    ages = [r["rollout_ages"] for r in writer.steps]
    assert ages == [[0], [1], [2], [2], [2]]  # steps 0-1 train on rollouts made before step 0


def test_delay_queue_hands_over_in_slot_order():
    queue = Delay(3)
    assert queue.early_slots(0) == [0, 1, 2] and queue.early_slots(1) == []
    assert queue.generated_slot(5) == 8
    rollouts = {s: StoredRollout(s, 0, 0, None, None, None, None, 0, 0) for s in range(8)}
    for s in range(3):
        queue.push_early(rollouts[s])
    for step in range(5):
        (got,) = queue.trained(step, rollouts[step + 3], seed=0)
        assert got is rollouts[step]
    assert [r.slot for r in queue.in_flight()] == [5, 6, 7]


def test_delay_queue_with_a_fresh_start_makes_slot_t_at_step_t_for_the_first_k_steps():
    queue = Delay(3, start="fresh")
    assert [queue.early_slots(t) for t in range(5)] == [[0], [1], [2], [], []]
    rollouts = {s: StoredRollout(s, 0, 0, None, None, None, None, 0, 0) for s in range(8)}
    for step in range(5):
        for slot in queue.early_slots(step):
            queue.push_early(rollouts[slot])
        (got,) = queue.trained(step, rollouts[step + 3], seed=0)
        assert got is rollouts[step]
    assert sorted(r.slot for r in queue.in_flight()) == [5, 6, 7]


def test_delay_with_a_fresh_start_trains_on_policy_for_k_steps_then_k_steps_late(tmp_path):
    delay, steps = 2, 5
    trainer, writer = make_trainer(["offpolicy.source=delay", f"offpolicy.delay={delay}",
                                    "offpolicy.delay_start=fresh"], tmp_path)
    _, starts = run_steps(trainer, steps)
    model = tiny_model()
    for step in range(steps):
        generated_at = step if step < delay else step - delay  # by hand: on-policy, then K late
        roll = _rollout_of(trainer, step)
        model.load_state_dict(starts[generated_at])
        with torch.no_grad():
            expected_logp, _ = response_logprobs(model, roll)
        rows = writer.tokens[step]
        want = expected_logp[rows["response_id"], rows["position"]].numpy()
        np.testing.assert_allclose(rows["logp_behavior"], want, rtol=0, atol=2e-5)
        assert set(rows["policy_version"].tolist()) == {generated_at * K_UPDATES}
    ages = [r["rollout_ages"] for r in writer.steps]
    assert ages == [[0], [0], [2], [2], [2]]


def test_delay_start_belongs_to_the_delay_source_and_names_its_values():
    with pytest.raises(ConfigError, match="offpolicy.delay_start belongs to offpolicy.source=delay"):
        compose(["offpolicy.delay_start=fresh"])
    with pytest.raises(ConfigError, match="offpolicy.delay_start"):
        compose(["offpolicy.source=delay", "offpolicy.delay=2", "offpolicy.delay_start=later"])


# -- ratio anchors ---------------------------------------------------------------------------


def _first_update_ratios(writer, step):
    rows = writer.tokens[step]
    return rows["ratio"][rows["update"] == 0]


@pytest.mark.parametrize("overrides", [[], ["offpolicy.source=delay", "offpolicy.delay=0"]])
def test_ratio_is_exactly_one_at_lag_zero(tmp_path, overrides):
    trainer, writer = make_trainer(overrides, tmp_path)
    run_steps(trainer, 3)
    for step in range(3):
        assert (_first_update_ratios(writer, step) == 1.0).all()
        rows = writer.tokens[step]
        assert (rows["lag"] == rows["update"]).all()


def test_recompute_gives_ratio_one_at_each_steps_first_update_whatever_the_lag(tmp_path):
    stale = ["offpolicy.source=delay", "offpolicy.delay=2"]
    coupled, coupled_writer = make_trainer(stale, tmp_path / "c")
    recompute, recompute_writer = make_trainer([*stale, "offpolicy.anchor=recompute"], tmp_path / "r")
    run_steps(coupled, 4)
    run_steps(recompute, 4)
    for step in range(4):
        assert (_first_update_ratios(recompute_writer, step) == 1.0).all()
        assert (recompute_writer.tokens[step]["lag"] >= 2 * min(step, 2)).all()
    # coupled sees the age: at step 3 the data is 4-5 updates old
    assert not np.allclose(_first_update_ratios(coupled_writer, 3), 1.0, atol=1e-6)


def test_decoupled_equals_coupled_when_no_data_is_older_than_its_step(tmp_path, capsys):
    a, wa = make_trainer([], tmp_path / "a")
    b, wb = make_trainer(["offpolicy.anchor=decoupled"], tmp_path / "b")
    assert "equals anchor=coupled" in capsys.readouterr().out
    run_steps(a, 2)
    run_steps(b, 2)
    for step in range(2):
        for key in ("ratio", "logp", "logp_behavior"):
            assert np.array_equal(wa.tokens[step][key], wb.tokens[step][key])


@pytest.mark.parametrize("rule", ["mask", "clamp"])
def test_decoupled_loss_is_the_formula_literally(rule):
    # The decoupled PPO objective, written out token by token:
    #   w = pi_prox / pi_behav, cut at the cap: 0 above it (mask, AReaL's default) or the cap
    #   (clamp, verl's truncated IS); u = pi / pi_prox,
    #   J = w * min(u A, clip(u, 1 - eps, 1 + eps) A), loss = -mean over the tokens of J,
    #   a masked token still counted in the mean.
    logp = torch.tensor([[-1.0, -0.5, -2.0], [-0.2, -3.0, -1.0]], dtype=torch.float64,
                        requires_grad=True)
    logp_prox = torch.tensor([[-1.1, -0.9, -1.8], [-0.2, -2.0, -1.5]], dtype=torch.float64)
    logp_behav = torch.tensor([[-1.5, -0.9, -3.1], [-0.1, -2.5, -3.0]], dtype=torch.float64)
    adv = torch.tensor([1.5, -0.7], dtype=torch.float64)
    mask = torch.tensor([[True, True, True], [True, True, False]])
    cap, eps = 2.0, 0.2
    literal, n = 0.0, 0
    for i in range(2):
        for t in range(3):
            if not mask[i, t]:
                continue
            w = math.exp(logp_prox[i, t] - logp_behav[i, t])
            if w > cap:
                w = 0.0 if rule == "mask" else cap
            u = torch.exp(logp[i, t] - logp_prox[i, t])
            a = float(adv[i])
            j = w * torch.minimum(u * a, torch.clamp(u, 1 - eps, 1 + eps) * a)
            literal, n = literal - j, n + 1
    literal = literal / n
    (expected_grad,) = torch.autograd.grad(literal, logp)

    ppo = build_method("ppo", {})
    weight = behaviour_weight(logp_prox, logp_behav, mask, cap, rule)
    # token (0, 2): pi_prox / pi_behav = e^1.3 = 3.67, above the cap: masked or cut to it;
    # the other tokens' weights are at most e^0.5 = 1.65 and stay
    assert weight[0, 2] == (0.0 if rule == "mask" else 2.0) and weight[1, 2] == 1.0  # padding 1
    assert weight[1, 1] == pytest.approx(math.exp(0.5))
    out = ppo.loss(logp, logp_prox, adv, mask, token_weight=weight)
    assert float(out.loss.detach()) == pytest.approx(float(literal.detach()), rel=1e-12)
    (grad,) = torch.autograd.grad(out.loss, logp)
    assert torch.allclose(grad, expected_grad, rtol=1e-12, atol=1e-15)
    assert capped_share(logp_prox, logp_behav, mask, cap) == pytest.approx(1 / 5)


# -- replay ----------------------------------------------------------------------------------


def test_replay_draws_are_seeded_from_the_buffer_before_the_step():
    def fill(seed_of_step):
        source = Replay(capacity=3, draws=2)
        history = []
        for step in range(6):
            fresh = StoredRollout(step, 0, step, None, None, None, None, 0, 0)
            trained = source.trained(step, fresh, seed=seed_of_step(step))
            assert trained[0] is fresh and fresh not in trained[1:]
            history.append([r.slot for r in trained])
        return history

    a, b = fill(lambda s: 100 + s), fill(lambda s: 100 + s)
    assert a == b  # seeded: the same draws
    assert a[0] == [0] and a[1] == [1, 0] and sorted(a[2][1:]) == [0, 1]
    for step, slots in enumerate(a):
        drawn = slots[1:]
        assert len(drawn) == min(2, step) and len(set(drawn)) == len(drawn)
        assert all(max(0, step - 3) <= s < step for s in drawn)  # the last 3 before this one
    draws = {tuple(fill(lambda s, k=k: k * 1000 + s)[5]) for k in range(10)}
    assert len(draws) > 1  # the seed moves the draw


def test_replay_run_is_deterministic_and_logs_the_ages(tmp_path):
    overrides = ["offpolicy.source=replay", "offpolicy.replay_capacity=2", "offpolicy.replay_draws=1"]
    a, wa = make_trainer(overrides, tmp_path / "a")
    b, wb = make_trainer(overrides, tmp_path / "b")
    run_steps(a, 4)
    run_steps(b, 4)
    strip = [{k: v for k, v in r.items() if not k.startswith("time_")} for r in wa.updates]
    assert strip == [{k: v for k, v in r.items() if not k.startswith("time_")} for r in wb.updates]
    assert [len(r["rollout_slots"]) for r in wa.steps] == [1, 2, 2, 2]
    assert all(r["rollout_slots"][0] == r["step"] for r in wa.steps)
    assert [len([u for u in wa.updates if u["step"] == s]) for s in range(4)] == [2, 4, 4, 4]
    for r in wa.steps[1:]:  # the drawn rollout is one of the last two
        assert r["rollout_ages"][1] in (1, 2) and r["policy_lag_max"] >= 2


# -- telemetry ---------------------------------------------------------------------------------


def test_drift_metrics_by_hand():
    logp_b = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[1.0, 2.0, 0.5, 9.0]]))
    mask = torch.tensor([[True, True, True, False]])
    weight = torch.tensor([[1.0, 2.0, 0.25, 7.0]])
    out = drift_metrics(logp, logp_b, mask, torch.tensor([3]), weight)
    l2 = math.log(2)
    assert out["behav_abs_log_ratio_mean"] == pytest.approx(2 * l2 / 3)
    assert out["behav_kl_k1"] == pytest.approx(0.0, abs=1e-9)  # -(0 + l2 - l2) / 3
    # k3 = (r - 1) - log r: 0, 1 - l2, -0.5 + l2
    assert out["behav_kl_k3"] == pytest.approx(0.5 / 3)
    assert out["behav_m2"] == pytest.approx(2 * l2 ** 2 / 3)
    assert out["behav_ess"] == pytest.approx(3.5 ** 2 / (3 * 5.25))
    assert (out["behav_weight_min"], out["behav_weight_mean"], out["behav_weight_max"]) == \
        (pytest.approx(0.25), pytest.approx(3.25 / 3), pytest.approx(2.0))
    assert (out["policy_lag"], out["policy_lag_max"]) == (3.0, 3)
    assert (out["version_span_mean"], out["version_span_max"]) == (0.0, 0)
    # two responses: lags 5, 5, 2 (span 3) and 1 (span 0, its padding ignored)
    spans = drift_metrics(torch.zeros(2, 3), torch.zeros(2, 3),
                          torch.tensor([[True, True, True], [True, False, False]]),
                          torch.tensor([[5, 5, 2], [1, 9, 9]]))
    assert (spans["version_span_mean"], spans["version_span_max"]) == (1.5, 3)
    assert spans["policy_lag"] == pytest.approx(13 / 4) and spans["policy_lag_max"] == 5


def test_ratio_histogram_bins_are_right_closed():
    ratio = torch.tensor([[0.2, 0.21, 1.0, 1.2, 2.0, 2.5, 0.9, 0.1]])
    adv = torch.tensor([[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, -1.0, -1.0]])
    out = ratio_histogram(ratio, adv, torch.ones(1, 8, dtype=torch.bool))
    assert len(RATIO_BIN_EDGES) + 1 == 8
    assert out["ratio_hist_pos"] == [1, 1, 0, 1, 1, 0, 1, 1]  # 0.2 | 0.21 | . | 1.0 | 1.2 | . | 2.0 | 2.5
    assert out["ratio_hist_neg"] == [1, 0, 0, 1, 0, 0, 0, 0]


# -- micro-batching under the anchors -----------------------------------------------------------


@pytest.mark.parametrize("method", ["ppo", "bapo", "top_entropy", "m2po", "cispo"])
def test_micro_batches_give_the_whole_gradient_with_a_proximal_anchor_and_weights(method):
    from src.minibatches import MiniBatch
    from src.trainer import Trainer
    from tests.test_microbatch import ADVANTAGES, _config
    from tests.tiny_policy import B, tiny_rollout

    model, data = tiny_model(), tiny_rollout()
    with torch.no_grad():
        logp, ent = response_logprobs(model, data)
    gen = torch.Generator().manual_seed(3)
    logp_b = logp + 0.3 * torch.randn(logp.shape, generator=gen)
    logp_prox = logp + 0.1 * torch.randn(logp.shape, generator=gen)
    weight = behaviour_weight(logp_prox, logp_b, data.response_mask, 2.0, "mask")
    grads = []
    for micro in (None, 2):
        trainer = Trainer(_config(method, "token-mean", micro), model, None, None, None, None,
                          None, None, None)
        mb = MiniBatch(torch.arange(B), data, logp_b, ent, ADVANTAGES.clone(), torch.zeros(B),
                       logp_old=logp_prox, token_weight=weight)
        model.zero_grad(set_to_none=True)
        done = trainer.update.gradient(mb, seed=5)
        assert done.skip_reason is None
        grads.append([p.grad.detach().clone() for p in model.parameters()])
    for whole, micro in zip(*grads, strict=True):
        assert torch.allclose(whole, micro, rtol=1e-5, atol=1e-7)


# -- the split and the config -------------------------------------------------------------------


def test_split_rows_is_todays_minibatch_permutation():
    gen = torch.Generator().manual_seed(42)
    perm = torch.randperm(12, generator=gen).view(3, -1)
    assert [r.tolist() for r in split_rows(12, 3, 42)] == [p.sort().values.tolist() for p in perm]


@pytest.mark.parametrize(("overrides", "message"), [
    (["offpolicy.source=delay"], "offpolicy.delay must be set with offpolicy.source=delay"),
    (["offpolicy.source=delay", "offpolicy.delay=-1"], "offpolicy.delay must be >= 0"),
    (["offpolicy.source=replay", "offpolicy.replay_capacity=2", "offpolicy.replay_draws=3"],
     "offpolicy.replay_draws is 3: that draws more rollouts than the buffer holds"),
    (["offpolicy.source=delay", "offpolicy.delay=2", "offpolicy.replay_draws=1"],
     "offpolicy.replay_draws belongs to offpolicy.source=replay, but the source is delay"),
    (["offpolicy.delay=4"], "offpolicy.delay belongs to offpolicy.source=delay"),
    (["offpolicy.anchor=decoupled", "offpolicy.weight_cap=0"], "offpolicy.weight_cap must be a finite number > 1"),
    (["offpolicy.anchor=decoupled", "offpolicy.weight_cap=0.5"], "offpolicy.weight_cap must be a finite number > 1"),
    (["offpolicy.anchor=decoupled", "offpolicy.weight_cap=1"], "offpolicy.weight_cap must be a finite number > 1"),
    (["offpolicy.anchor=decoupled", "offpolicy.weight_rule=truncate"], "offpolicy.weight_rule must be one of"),
    (["offpolicy.anchor=proximal"], "offpolicy.anchor must be one of"),
    (["offpolicy.source=queue"], "offpolicy.source must be one of"),
])
def test_bad_offpolicy_values_name_their_key(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compose(overrides)


def test_replay_defaults_and_stored_configs_without_the_section():
    from src.config import OffPolicyConfig, to_container
    from src.run_dir import config_differences
    from src.run_vocab import ADDED_SECTIONS, DEFAULTS_CHANGED_SINCE, upgrade_config

    cfg = compose(["offpolicy.source=replay"])
    assert (cfg.offpolicy.replay_capacity, cfg.offpolicy.replay_draws) == (4, 1)
    defaults = to_container(compose([]))["offpolicy"]
    assert defaults == vars(OffPolicyConfig())
    # the values runs used before the section existed are today's defaults, but for the keys
    # whose default moved since (listed, with the values those runs used)
    changed = {k.removeprefix("offpolicy."): ADDED_SECTIONS["offpolicy"][k.removeprefix("offpolicy.")]
               for k in DEFAULTS_CHANGED_SINCE}
    assert changed == {"weight_cap": 2.0, "weight_rule": "clamp"}
    assert {**defaults, **changed} == ADDED_SECTIONS["offpolicy"]
    assert all(defaults[k] != v for k, v in changed.items())  # listed only if it moved
    # a run dir committed before the section existed holds the default run (the weight's
    # cap and rule, which moved, change no number under the default coupled anchor)
    old = copy.deepcopy(to_container(compose([])))
    del old["offpolicy"]
    assert config_differences(upgrade_config(old), to_container(compose([]))) == []
    delayed = to_container(compose(["offpolicy.source=delay", "offpolicy.delay=3"]))
    keys = [k for k, _, _ in config_differences(upgrade_config(old), delayed)]
    assert keys == ["offpolicy.delay", "offpolicy.source"]


# -- partial rollouts ------------------------------------------------------------------------------


def test_continuing_a_prefix_gives_the_uninterrupted_tokens_when_the_weights_did_not_change():
    from src.models.decoding import decode
    from src.rollout.hf import HFRollout

    class Tok:
        eos_token_id, pad_token_id = 60, 0

    model = tiny_model().eval()
    prompts = [torch.tensor([5, 9, 11, 3]), torch.tensor([7, 8])]
    whole = []
    for p in prompts:
        out = decode(model, p[None, :], torch.ones(1, p.numel(), dtype=torch.bool),
                     max_new_tokens=10, eos_token_id=60, pad_token_id=0, greedy=True)
        whole.append(out.tokens[0, :int(out.lengths[0])].tolist())
    engine = HFRollout(model, Tok())
    # 4 tokens, then the rest from a new prefill of prompt + those 4, in two segments
    first = engine.continue_responses(prompts, [4, 4], greedy=True)
    contexts = [torch.cat([p, torch.tensor(t)]) for p, (t, _) in zip(prompts, first, strict=True)]
    second = engine.continue_responses(contexts, [6, 6], greedy=True)
    for w, (a, _), (b, _) in zip(whole, first, second, strict=True):
        assert a + b == w


def test_partial_rollouts_keep_each_tokens_version_and_train_ended_groups(tmp_path):
    budget = 3
    trainer, writer = make_trainer(["offpolicy.source=partial", f"offpolicy.token_budget={budget}",
                                    "offpolicy.mask_stale_prefix=true"], tmp_path)
    asked, real_generate, real_continue = [], trainer.backend.generate, trainer.backend.continue_responses

    def generate(prompts, **kw):
        asked.append(kw["max_new_tokens"])
        return real_generate(prompts, **kw)

    def continue_responses(contexts, caps, **kw):
        asked.extend(caps)
        out = real_continue(contexts, caps, **kw)
        assert all(len(tokens) <= cap for (tokens, _), cap in zip(out, caps, strict=True))
        return out

    trainer.backend.generate, trainer.backend.continue_responses = generate, continue_responses
    run_steps(trainer, 6)
    assert max(asked) == budget  # no response got more than the budget in one step
    trained_steps = [s for s in range(6) if s in writer.tokens]
    assert trained_steps, "no group ended in 6 steps"
    spans = []
    for step in trained_steps:
        rows = writer.tokens[step]
        for rid in set(rows["response_id"].tolist()):
            mine = rows["response_id"] == rid  # each response is in one update (epochs=1)
            versions = rows["policy_version"][mine][np.argsort(rows["position"][mine])]
            assert (np.diff(versions) >= 0).all()  # later segments, newer weights
            assert (versions <= 2 * step).all()  # generated by weights no newer than this step's
            in_loss = rows["in_loss"][mine][np.argsort(rows["position"][mine])]
            assert np.array_equal(in_loss, versions == versions.max())  # stale prefix masked
            spans.append(int(versions.max() - versions.min()))
        logged = [u["version_span_max"] for u in writer.updates if u["step"] == step]
        assert max(logged) == max(spans[-len(set(rows["response_id"].tolist())):])
        # lag + version is the current version: one value per update, one more each update
        current = rows["lag"] + rows["policy_version"]
        firsts = {int(u): set(current[rows["update"] == u].tolist()) for u in np.unique(rows["update"])}
        start = min(firsts[0])
        assert firsts == {u: {start + u} for u in firsts}
    assert max(spans) > 0  # some response was continued under newer weights
    idle = [r for r in writer.steps if r["num_groups"] == 0]
    assert all(r["skipped_updates"] == 0 for r in idle)
    assert all("in_flight_responses" in r for r in writer.steps)


def test_partial_needs_a_budget_of_at_least_one_token():
    with pytest.raises(ConfigError, match="offpolicy.token_budget must be set"):
        compose(["offpolicy.source=partial"])
    with pytest.raises(ConfigError, match="offpolicy.token_budget must be >= 1, got 0"):
        compose(["offpolicy.source=partial", "offpolicy.token_budget=0"])
    with pytest.raises(ConfigError, match="offpolicy.token_budget belongs to offpolicy.source=partial"):
        compose(["offpolicy.token_budget=4"])


# -- the decoupled weight's rule against AReaL's code, and runs made with the old rule ---------
#
# The reference is transcribed from github.com/inclusionAI/AReaL at commit
# 4aef98d8d818af55b43621aaadba047ae10f4e77: areal/utils/functional/functional.py
# (`_check_bounds`, `apply_rejection_sampling`, `ppo_actor_loss_fn`) and the defaults of
# areal/api/cli_args.py `RejectionSamplingConfig` (level token, action mask, metric ratio,
# upper 5.0; action=clamp defaults lower to 0.0). Left out: the input checks, the
# sequence-level branch and the KL metrics (not the configuration compared), GSPO's
# sequence ratio and the logging stats.


@dataclasses.dataclass
class RejectionSamplingConfig:
    level: str = "token"
    action: str = "mask"
    metric: str = "ratio"
    agg: str = "mean"
    upper: float = 5.0
    lower: float | None = None

    def __post_init__(self):
        # Clamp action defaults lower to 0.0 (consistent with old truncate behavior).
        if self.action == "clamp" and self.lower is None:
            self.lower = 0.0


def _check_bounds(metric, config):
    if config.lower is not None:
        return (metric >= config.lower) & (metric <= config.upper)
    else:
        return metric <= config.upper


def apply_rejection_sampling(proximal_logprobs, old_logprobs, loss_mask, cu_seqlens, config):
    # Step 1: Compute log ratio = log(π_proximal / π_behave)
    # Upcast operands to fp32 before subtraction to avoid precision loss in bf16/fp16.
    log_ratio = proximal_logprobs.detach().float() - old_logprobs.detach().float()
    # Sanitize non-finite values (e.g. -inf - (-inf) = NaN) to prevent NaN propagation.
    log_ratio = torch.where(torch.isfinite(log_ratio), log_ratio, 0.0)

    # Step 2: Compute metric value (reuse existing KLEstimator sign conventions)
    if config.metric == "ratio":
        # Direct ratio π_proximal / π_behave
        metric = torch.exp(log_ratio)
    else:
        raise ValueError(f"Unknown metric: {config.metric}")  # (KL metrics not transcribed)

    # Step 3: Compute behave_imp_weight (needed for both modes)
    behave_imp_weight = torch.exp(log_ratio)
    # Save original weight before any clamping, to compute clamped fraction later.
    original_weight = behave_imp_weight

    # Token level
    if config.action == "mask":
        in_bounds = _check_bounds(metric, config)
    else:
        # clamp mode: directly clamp importance weight
        behave_imp_weight = behave_imp_weight.clamp(
            min=config.lower if config.lower is not None else 0.0,
            max=config.upper,
        )

    # Step 5: Update loss_mask or keep it based on action mode
    if config.action == "mask":
        candidates = loss_mask.bool()
        updated_mask = (candidates & in_bounds).to(loss_mask.dtype)
        filtered_count = (candidates & ~in_bounds).sum().item()
        total_count = candidates.sum().item()
        filtered_fraction = filtered_count / max(total_count, 1)
    else:
        # clamp mode: loss_mask unchanged
        updated_mask = loss_mask
        # Report fraction of clamped tokens (for logging)
        clamped_count = (
            (loss_mask.bool() & (original_weight != behave_imp_weight)).sum().item()
        )
        total_count = loss_mask.bool().sum().item()
        filtered_fraction = clamped_count / max(total_count, 1)

    # Apply loss_mask to behave_imp_weight
    behave_imp_weight = torch.where(updated_mask.bool(), behave_imp_weight, 0.0)

    return updated_mask, behave_imp_weight, filtered_fraction


def ppo_actor_loss_fn(logprobs, proximal_logprobs, old_logprobs, advantages, eps_clip, loss_mask,
                      eps_clip_higher=None, c_clip=None, rejection_sampling=None):
    # Save original count BEFORE rejection sampling may modify loss_mask.
    loss_mask_count = loss_mask.count_nonzero() or 1

    # === Apply rejection sampling (replaces old compute_behave_imp_weight) ===
    if rejection_sampling is not None:
        loss_mask, behave_imp_weight, filtered_fraction = apply_rejection_sampling(
            proximal_logprobs=proximal_logprobs,
            old_logprobs=old_logprobs,
            loss_mask=loss_mask,
            cu_seqlens=None,
            config=rejection_sampling,
        )
    else:
        filtered_fraction = 0.0

    # Standard PPO: per-token ratio
    ratio = torch.where(loss_mask, torch.exp(logprobs - proximal_logprobs), 0)

    clipped_ratio = torch.clamp(
        ratio,
        1.0 - eps_clip,
        1.0 + (eps_clip if eps_clip_higher is None else eps_clip_higher),
    )

    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * clipped_ratio
    pg_loss = torch.max(pg_loss1, pg_loss2)
    if c_clip is not None:
        assert c_clip > 1.0, c_clip
        pg_loss3 = torch.sign(advantages) * c_clip * advantages
        pg_loss = torch.min(pg_loss, pg_loss3)

    # Apply behavioural importance weight from rejection sampling
    if rejection_sampling is not None:
        pg_loss = pg_loss * behave_imp_weight

    pg_loss = torch.where(loss_mask, pg_loss, 0).sum() / loss_mask_count
    return pg_loss, filtered_fraction


def _decoupled_batch(seed, dtype=torch.float32):
    """Right-padded responses whose behaviour weights spread over ~[0.1, 10], one at 12.2 (so
    above either cap); padding holds finite junk."""
    g = torch.Generator().manual_seed(seed)
    b, t = 6, 8
    logp_behav = -3.0 * torch.rand(b, t, generator=g, dtype=dtype)
    logp_prox = logp_behav + 1.0 * torch.randn(b, t, generator=g, dtype=dtype)
    logp_prox[0, :2] = logp_behav[0, :2] + torch.tensor([2.5, 0.1], dtype=dtype)  # w 12.2, 1.1
    logp = logp_prox + 0.3 * torch.randn(b, t, generator=g, dtype=dtype)
    lengths = torch.randint(2, t + 1, (b,), generator=g)
    mask = torch.arange(t)[None, :] < lengths[:, None]
    adv = torch.randn(b, generator=g, dtype=dtype)[:, None].expand(b, t) * mask
    return logp, logp_prox, logp_behav, adv, mask


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("rule", "cap"), [("mask", 5.0), ("mask", 2.0), ("clamp", 5.0),
                                           ("clamp", 2.0)])
def test_decoupled_objective_is_areals(rule, cap, seed):
    # float32 log-probs, as training computes them: AReaL's weights (taken in float32) and
    # the project's are then the same numbers, and so are its mask decisions at the cap
    logp, logp_prox, logp_behav, adv, mask = _decoupled_batch(seed)
    w = (logp_prox - logp_behav).exp()[mask]
    assert bool((w > cap).any()) and bool((w <= cap).any())  # tokens on both sides of the cap

    theirs = logp.clone().requires_grad_()
    ref, filtered = ppo_actor_loss_fn(theirs, logp_prox, logp_behav, adv, 0.2, mask,
                                      rejection_sampling=RejectionSamplingConfig(action=rule, upper=cap))
    (ref_grad,) = torch.autograd.grad(ref, theirs)

    ours = logp.clone().requires_grad_()
    weight = behaviour_weight(logp_prox, logp_behav, mask, cap, rule)
    out = build_method("ppo", {}).loss(ours, logp_prox, adv, mask, token_weight=weight)
    (grad,) = torch.autograd.grad(out.loss, ours)
    torch.testing.assert_close(out.loss, ref, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-6, atol=1e-8)
    # masked tokens carry no gradient (and count in the mean); clamped ones keep one
    above = mask & ((logp_prox - logp_behav).exp() > cap)
    assert bool((grad[above] == 0).all()) == (rule == "mask")
    assert capped_share(logp_prox, logp_behav, mask, cap) == pytest.approx(filtered)


def test_the_two_rules_part_only_above_the_cap():
    logp, logp_prox, logp_behav, adv, mask = _decoupled_batch(0, torch.float64)
    cap = float((logp_prox - logp_behav).exp()[mask].max()) + 1.0  # no token above it
    grads = {}
    for rule in ("mask", "clamp"):
        x = logp.clone().requires_grad_()
        out = build_method("ppo", {}).loss(x, logp_prox, adv, mask, token_weight=behaviour_weight(
            logp_prox, logp_behav, mask, cap, rule))
        grads[rule] = torch.autograd.grad(out.loss, x)[0]
    assert torch.equal(grads["mask"], grads["clamp"])


def test_runs_made_with_the_clamp_keep_reading_as_it_and_keep_their_cell():
    import yaml

    from analysis.core.cells import numeric_config
    from src.config import to_container
    from src.run_dir import config_differences
    from src.run_vocab import upgrade_config
    from tests.conftest import REPO

    # a committed decoupled run of the lag sweep: its offpolicy section predates weight_rule
    path = (REPO / "experiments" / "lag_results" / "delay_16" / "ppo"
            / "offpolicy.anchor=decoupled,train.threads=1" / "seed0" / "config.yaml")
    stored = yaml.safe_load(path.read_text())
    assert stored["offpolicy"]["anchor"] == "decoupled" and "weight_rule" not in stored["offpolicy"]
    upgraded = upgrade_config(stored)
    assert (upgraded["offpolicy"]["weight_rule"], upgraded["offpolicy"]["weight_cap"]) == ("clamp", 2.0)
    # the cell it was: reading it through the upgrade moves nothing, and its numeric config
    # holds neither key (they equal what runs before the key used), as before the key existed
    cell = numeric_config(stored)
    assert numeric_config(upgraded) == cell
    assert not {"offpolicy.weight_rule", "offpolicy.weight_cap"} & set(cell)
    # a run made today with the clamp at 2.0 is a seed of that cell; today's default is not
    same = copy.deepcopy(upgraded)
    assert numeric_config(same) == cell
    today = copy.deepcopy(upgraded)
    today["offpolicy"].update(weight_rule="mask", weight_cap=5.0)
    moved = {k: v for k, v in numeric_config(today).items() if cell.get(k) != v}
    assert moved == {"offpolicy.weight_rule": "mask", "offpolicy.weight_cap": 5.0}
    # resuming it with today's default is refused by the config comparison, naming the keys
    now = to_container(compose(["experiment=delay_16", "offpolicy.anchor=decoupled"]))
    keys = {k for k, _, _ in config_differences(upgraded, now) if k.startswith("offpolicy.")}
    assert keys == {"offpolicy.weight_rule", "offpolicy.weight_cap"}


def test_the_weight_keys_change_no_cell_and_no_resume_under_another_anchor():
    from analysis.core.cells import numeric_config
    from src.config import to_container
    from src.run_dir import config_differences

    coupled = to_container(compose(["experiment=delay_16"]))
    old = copy.deepcopy(coupled)
    old["offpolicy"].update(weight_cap=2.0, weight_rule="clamp")  # as made before the move
    assert numeric_config(old) == numeric_config(coupled)
    assert config_differences(old, coupled) == []
    decoupled = copy.deepcopy(coupled)
    decoupled["offpolicy"]["anchor"] = "decoupled"
    keys = [k for k, _, _ in config_differences(old, decoupled)]
    assert keys == ["offpolicy.anchor", "offpolicy.weight_cap", "offpolicy.weight_rule"]
