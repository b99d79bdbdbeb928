"""The update microscope (src/microscope/): the trunk is the run, a branch of the trunk's own
method is the trunk's update, the restore is exact, and each kind of arm does what it says,
with expectations computed here from the trunk's own token rows."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from src.microscope.__main__ import main as microscope_main
from src.microscope.branch import Microscope
from src.microscope.state import state_digest
from src.run import execute
from tests.conftest import compose, config_error, token_rows
from tests.test_e2e import read_metrics

ARMS = ["ppo", "bapo", "clip:0.5,1.2", "noclip", "mask:high_neg", "zero", "nonorm:clip_higher"]


class Recording(Microscope):
    """Records, around every branched state, the trunk's state digest before and after the
    branches, the weights after the trunk-method arm's update, and then (by wrapping the
    trunk's gradient step) the trunk's weights after its own update."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.digests, self.branch_weights, self.trunk_weights = [], [], []

    def attach(self, parts, state):
        super().attach(parts, state)
        trainer = parts.trainer
        own_step = trainer.update

        def recorded(*args, **kwargs):
            out = own_step(*args, **kwargs)
            if self.pending:
                self.trunk_weights.append([p.detach().clone() for p in trainer.model.parameters()])
                self.pending = False
            return out

        self.pending = False
        trainer.update = recorded

    def branch(self, mb, **where):
        trainer = self.parts.trainer
        inputs = [t.clone() for t in (mb.logp_old, mb.advantages, mb.loss_mask)]
        before = state_digest(trainer.model, trainer.optimizer, trainer.scheduler)
        super().branch(mb, **where)
        after = state_digest(trainer.model, trainer.optimizer, trainer.scheduler)
        if self.chosen(where["step"], where["update"]):
            self.digests.append((before, after))
            self.pending = True
            for saved, now in zip(inputs, (mb.logp_old, mb.advantages, mb.loss_mask), strict=True):
                assert torch.equal(saved, now), "a branch wrote to the trunk's mini-batch"

    def _update(self, arm, mb, classes, version, on_policy, seed):
        out = super()._update(arm, mb, classes, version, on_policy, seed)
        if arm.spec == self.parts.cfg.method.name:
            self.branch_weights.append([p.detach().clone() for p in self.parts.trainer.model.parameters()])
        return out


# One pass per update, and the shape of study part 5 (fixed_update: every update holds a whole
# rollout's 16 responses) in passes of 4, where the methods decide over the whole mini-batch
# and gradients accumulate across the passes.
PASSES = {"one pass": [], "passes of 4": ["train.staleness_mode=fixed_update",
                                          "train.micro_batch_size=4"]}


@pytest.fixture(scope="module", params=list(PASSES))
def study(request, tmp_path_factory, smoke_overrides):
    """A microscope study on the smoke testbed (3 rollouts x 2 updates, every state branched)
    and the same run by `python -m src.run`'s `execute`."""
    from src.microscope.study import prepare, study_label, write_settings

    root = tmp_path_factory.mktemp("microscope")
    overrides = [*smoke_overrides, "method=ppo", "logger.token_fraction=1.0", *PASSES[request.param]]
    plain = root / "plain"
    assert execute(compose(overrides), plain) == "finished"
    s = prepare([*overrides, f"microscope.arms=[{','.join(repr(a) for a in ARMS)}]",
                 "microscope.probe_prompts=4", "microscope.correct_problems=8",
                 "microscope.subset_arms=[sapo]", "microscope.subset_every=2",
                 "microscope.horizon_arms=[ppo,'clip:0.99,1.01']", "microscope.horizon_states=[1]",
                 "microscope.horizon=2", "microscope.horizon_eval_problems=8",
                 "microscope.horizon_eval_samples=2", f"microscope.dir={root / 'study'}"])
    write_settings(s)
    label = study_label(s.cfg)
    scope = Recording(s.settings, s.arms, s.dir, label, s.horizon_arms)
    horizon_ends = {}
    own_run_arm = scope.horizons._run_arm

    def run_arm(arm, state):  # the weights each short-horizon arm ends with
        own_run_arm(arm, state)
        horizon_ends[arm.spec] = [p.detach().clone() for p in scope.parts.model.parameters()]

    scope.horizons._run_arm = run_arm
    assert execute(s.cfg, s.trunk_dir, overrides=s.trunk_args, observe=scope.attach) == "finished"
    table = pd.read_parquet(s.dir / "branches.parquet")
    return {"plain": plain, "trunk": s.trunk_dir, "scope": scope, "table": table,
            "horizons": pd.read_parquet(s.dir / "horizons.parquet"), "horizon_ends": horizon_ends,
            "trunk_end": [p.detach().clone() for p in scope.parts.model.parameters()]}


def _strip_times(records):
    return [{k: v for k, v in r.items() if not k.startswith("time_")} for r in records]


@pytest.mark.slow
def test_the_trunk_is_the_run(study):
    plain, trunk = study["plain"], study["trunk"]
    assert (trunk / "config.yaml").read_bytes() == (plain / "config.yaml").read_bytes()
    a, b = read_metrics(plain), read_metrics(trunk)
    for kind in ("update", "step", "eval"):
        assert _strip_times(a[kind]) == _strip_times(b[kind])
    assert token_rows(trunk) == token_rows(plain)


@pytest.mark.slow
def test_a_branch_of_the_trunks_method_is_the_trunks_update(study):
    scope = study["scope"]
    assert len(scope.branch_weights) == len(scope.trunk_weights) == 6  # 3 rollouts x 2 updates
    for branch, trunk in zip(scope.branch_weights, scope.trunk_weights, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(branch, trunk, strict=True))


@pytest.mark.slow
def test_the_restore_is_exact(study):
    digests = study["scope"].digests
    assert len(digests) == 6
    assert all(before == after for before, after in digests)


def _trunk_tokens(study, rollout, update):
    rows = [r for part in token_rows(study["trunk"]).values() for r in part
            if r["step"] == rollout and r["update"] == update]
    return pd.DataFrame(rows)


@pytest.mark.slow
def test_each_kind_of_arm_against_the_trunks_tokens(study):
    table = study["table"]
    assert sorted(table["arm"].unique()) == sorted([*ARMS, "sapo"])
    # every arm at the 6 states; the subset arm at rollouts 0 and 2 only
    assert len(table) == 6 * len(ARMS) + 4
    assert sorted(set(table.query("arm == 'sapo'")["rollout"])) == [0, 2]
    for (rollout, update), rows in table.groupby(["rollout", "update"]):
        arms = rows.set_index("arm")
        tokens = _trunk_tokens(study, rollout, update)
        ratio, adv = tokens["ratio"].to_numpy(), tokens["advantage"].to_numpy()
        # noclip: the share of sum |r A| on A > 0, every token carrying its gradient
        mass = ratio * abs(adv)
        if mass.sum() > 0:
            assert math.isclose(arms.loc["noclip", "positive_share"],
                                mass[adv > 0].sum() / mass.sum(), rel_tol=1e-6)
        if len(tokens):
            assert arms.loc["noclip", "clip_fraction"] == 0.0
        # fixed bounds: the tokens outside [0.5, 1.2] on the side that binds, by hand
        clipped = ((adv > 0) & (ratio > 1.2)) | ((adv < 0) & (ratio < 0.5))
        if len(tokens):
            assert math.isclose(arms.loc["clip:0.5,1.2", "clip_fraction"], clipped.mean())
        assert (arms.loc["clip:0.5,1.2", ["c_low", "c_high"]].tolist() == [0.5, 1.2])
        # the class: p below the median of p over the loss tokens, A < 0 / p at or above it
        p = torch.tensor(tokens["logp_behavior"].to_numpy(), dtype=torch.float64).exp().numpy()
        median = float(torch.tensor(p).median()) if len(tokens) else 0.0
        high_neg = int(((p >= median) & (adv < 0)).sum()) if len(tokens) else 0
        assert arms.loc["mask:high_neg", "n_high_neg"] == high_neg
        if high_neg:
            assert arms.loc["mask:high_neg", "tokens_in_loss"] == high_neg
        # zero: no gradient, so nothing but the optimizer's own drift
        assert arms.loc["zero", "grad_norm"] == 0.0
        # nonorm: the norm is measured but never clipped
        assert not arms.loc["nonorm:clip_higher", "grad_clipped"]
        assert arms.loc["nonorm:clip_higher", "c_high"] == pytest.approx(1.28)


@pytest.mark.slow
def test_on_policy_update_zero_is_the_same_for_every_clip_rule(study):
    """At update 0 the ratio is 1 on every token, so no bound binds: ppo, bapo, fixed bounds
    and no clip make the same step (the same measured change, to the bit)."""
    first = study["table"].query("update == 0").set_index(["rollout", "arm"])
    for rollout in first.index.get_level_values(0).unique():
        same = [first.loc[(rollout, arm), "d_entropy"] for arm in ("ppo", "bapo", "clip:0.5,1.2", "noclip")]
        assert len(set(same)) == 1


def test_bad_arms_and_keys_exit_2_naming_them(capsys, smoke_overrides, tmp_path):
    base = [*smoke_overrides, f"microscope.dir={tmp_path / 's'}"]
    for arm, words in [("clip:0.9", "clip:LOW,HIGH"), ("clip:1.2,1.5", "LOW < 1 < HIGH"),
                       ("mask:middle", "token class"), ("no_such_method", "no arm")]:
        message = config_error(capsys, lambda a=arm: microscope_main([*base, f"microscope.arms=['{a}']"]))
        assert message.startswith("microscope.arms") and words in message
    message = config_error(capsys, lambda: microscope_main([*base, "microscope.arms=[ppo]",
                                                            "microscope.evry=2"]))
    assert message.startswith("microscope.evry is not a microscope setting")
    message = config_error(capsys, lambda: microscope_main([*base, "microscope.arms=[]"]))
    assert message.startswith("microscope.arms must name at least one arm")
    assert not (tmp_path / "s").exists()


def test_a_study_resumes_only_with_its_own_settings(capsys, smoke_overrides, tmp_path):
    from src.microscope.study import prepare, write_settings

    base = [*smoke_overrides, f"microscope.dir={tmp_path / 's'}"]
    write_settings(prepare([*base, "microscope.arms=[ppo]", "microscope.every=2"]))
    message = config_error(capsys, lambda: microscope_main([*base, "microscope.arms=[ppo]",
                                                            "microscope.every=3"]))
    assert message.startswith("microscope.every: the study in") and "made with 2" in message


def test_the_table_keeps_finished_rollouts_on_resume_and_names_a_corrupt_file(tmp_path):
    from src.config_fields import ConfigError
    from src.microscope.table import BranchTable

    path = tmp_path / "branches.parquet"
    BranchTable(path, resume_at=0).add([{"rollout": r, "update": 0, "arm": "ppo"} for r in range(3)])
    assert [r["rollout"] for r in BranchTable(path, resume_at=2).rows] == [0, 1]
    path.write_bytes(b"PAR1 not a table")
    with pytest.raises(ConfigError, match="branches.parquet cannot be read"):
        BranchTable(path, resume_at=0)


@pytest.mark.slow
def test_a_short_horizon_branch_of_the_trunks_method_is_the_trunk_itself(study):
    """From step 1, two rollouts of ppo with the trunk's seeds are the trunk's own steps 1-2
    (common random numbers), so they end at the trunk's final weights; fixed bounds at
    [0.99, 1.01] end elsewhere. The table has the start and each arm, evaluated alike."""
    ends = study["horizon_ends"]
    assert all(torch.equal(x, y) for x, y in zip(ends["ppo"], study["trunk_end"], strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(ends["clip:0.99,1.01"], study["trunk_end"],
                                                      strict=True))
    h = study["horizons"].set_index("arm")
    assert list(h.index) == ["start", "ppo", "clip:0.99,1.01"]
    assert h.loc["start", "horizon"] == 0 and h.loc["ppo", "horizon"] == 2
    assert (h["eval_problems"] == 8).all() and (h["rollout"] == 1).all()
    # the trunk's final eval (step 3) differs in size, but its weights are the ppo arm's: the
    # probe reading of the ppo arm is the trunk's end reading
    from src.microscope.probes import Probes, read

    scope = study["scope"]
    probes = Probes.load(scope.study_dir / "probes.pt")
    end = read(scope.parts.model, probes, scope.parts.cfg.rollout.temperature)
    assert h.loc["ppo", "logp_correct"] == end.logp_correct


def test_a_study_in_committed_results_is_refused(capsys, smoke_overrides):
    from src.committed import REPO

    target = REPO / "experiments" / "microscope" / "not_here"
    message = config_error(capsys, lambda: microscope_main([*smoke_overrides, "microscope.arms=[ppo]",
                                                            f"microscope.dir={target}"]))
    assert message.startswith("microscope.dir") and "runs/" in message
    assert not target.exists()


def test_a_study_part_becomes_microscope_commands_with_its_settings(tmp_path):
    import yaml

    from experiments.microscope.run_study import study_jobs
    from src.microscope.config import parse_microscope
    from tests.conftest import REPO

    entry = yaml.safe_load((REPO / "experiments" / "sweeps.yaml").read_text())["microscope_smol"]
    first, *fifth = study_jobs("microscope_smol", [1, 5], tmp_path)
    settings, trunk = parse_microscope(first)
    assert trunk[:3] == ["seed=0", "method=ppo", "experiment=smol_4x"]
    assert "train.threads=1" in trunk
    assert settings.arms == entry["microscope"]["arms"]
    assert settings.subset_arms == entry["microscope"]["subset_arms"]
    assert settings.horizon_states == entry["microscope"]["horizon_states"]
    assert settings.dir == str(tmp_path / "smol_4x" / "ppo" / "seed0")
    assert len(fifth) == 2  # part 5: two trunks, with the part's own settings over the study's
    settings, trunk = parse_microscope(fifth[1])
    assert settings.arms == ["ppo", "bapo"] and settings.horizon_arms == [] and settings.last == 16
    assert "train.staleness_mode=fixed_update" in trunk and "seed=1" in trunk
    assert "train.micro_batch_size=8" in trunk  # memory alone (sweeps.yaml, pilot P4)
    assert settings.dir == str(tmp_path / "smol_4x" / "ppo" / "eval.every=6,train.micro_batch_size=8,"
                               "train.staleness_mode=fixed_update,train.steps=18" / "seed1")



def test_status_counts_the_planned_states_and_the_hours_left_at_the_jobs_pace(tmp_path):
    import pandas as pd

    from experiments.microscope.run_study import planned_states, status, study_jobs

    first, *fifth = study_jobs("microscope_smol", [1, 5], tmp_path)
    # part 1: rollouts 0-24 x updates 1-3; part 5: rollouts 0-16 x updates 1-3
    assert planned_states(first) == 25 * 3 and planned_states(fifth[0]) == 17 * 3
    assert planned_states([*first[:-1], "microscope.updates=[1,3]", "microscope.last=8"]) == 18
    # rollouts 2, 5, 8 (first 2, every 3) x 2 updates, as the branch chooses them
    assert planned_states(["microscope.arms=[ppo]", "microscope.first=2", "microscope.every=3",
                           "microscope.last=8", "microscope.updates=[1,3]"]) == 6
    # no last (the run's last rollout) or no updates (every one): the trunk's config decides
    assert planned_states(["microscope.arms=[ppo]", "microscope.updates=[1]"]) is None
    assert planned_states(["microscope.arms=[ppo]", "microscope.last=4"]) is None
    where = tmp_path / "smol_4x" / "ppo" / "seed0"
    where.mkdir(parents=True)
    # 15 states (5 rollouts x 3 updates), two arms each, 0.2 h of branches a state in all
    rows = [{"rollout": r, "update": u, "arm": a, "time_update_s": 300.0, "time_read_s": 60.0}
            for r in range(5) for u in (1, 2, 3) for a in ("ppo", "bapo")]
    pd.DataFrame(rows).to_parquet(where / "branches.parquet")
    line = status([first])[0]
    assert "trunk not started at rollout 0; 15 of 75 states branched (3.00 h" in line
    assert "about 12.0 h of branches left at its pace" in line  # 60 states x 0.2 h
    assert "left" not in status([fifth[0]])[0]  # nothing branched: no pace to read
