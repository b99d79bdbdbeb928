"""The microscope's own settings (`microscope.<key>=...` on the command line).

They live apart from the run's config on purpose: the trunk is an ordinary run, and its
config.yaml must be the one `python -m src.run` writes for the same overrides. These
settings go to the study's `microscope.yaml` instead, and a resumed study must match them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from src.config_fields import ConfigError, at_least, check_fields, or_none, setting

PREFIX = "microscope."


def _arms_check(arms: list) -> str | None:
    duplicated = sorted({a for a in arms if arms.count(a) > 1})
    return f"names an arm twice: {duplicated}" if duplicated else None


def _updates_check(updates: list | None) -> str | None:
    if updates is None:
        return None
    if not updates or any(not isinstance(u, int) or u < 0 for u in updates):
        return f"must be null (every update) or a non-empty list of update indices >= 0, got {updates}"
    return None


def _updates_check_list(values: list) -> str | None:
    if any(not isinstance(v, int) or v < 0 for v in values):
        return f"must be a list of trunk steps >= 0, got {values}"
    return None


@dataclass
class MicroscopeConfig:
    arms: list = setting([], "the arms branched at every chosen state: a method (ppo, bapo, ...), "
                         "clip:LOW,HIGH (fixed bounds), noclip, mask:CLASS (CLASS: low_pos, low_neg, "
                         "high_pos, high_neg), zero (the optimizer's drift alone), or nonorm:ARM (ARM without "
                         "gradient-norm clipping)",
                         _arms_check)
    subset_arms: list = setting([], "more arms, branched only at the chosen states whose rollout is a "
                                "multiple of microscope.subset_every (a cheaper subset of states)",
                                _arms_check)
    subset_every: int = setting(3, "see microscope.subset_arms", at_least(1))
    every: int = setting(1, "branch at rollouts (trunk steps) whose index is a multiple of this",
                         at_least(1))
    first: int = setting(0, "the first rollout to branch at", at_least(0))
    last: int | None = setting(None, "the last rollout to branch at (null: the run's last)",
                               or_none(at_least(0)))
    updates: list | None = setting(None, "the updates of a rollout to branch at (0 = on-policy; "
                                   "null: every one)", _updates_check)
    probe_prompts: int = setting(8, "held-out prompts whose sampled responses are the entropy/KL probe",
                                 at_least(1))
    probe_samples: int = setting(2, "responses sampled per probe prompt, once per study", at_least(1))
    probe_seed: int = setting(20_261_206, "the probe's own sampling seed (the trunk's RNG is "
                              "untouched)", at_least(0))
    correct_problems: int = setting(32, "held-out problems whose correct response is scored "
                                    "teacher-forced (log p(correct))", at_least(1))

    horizon_arms: list = setting([], "arms trained for `horizon` rollouts from the same trunk state "
                                 "(methods, clip:LOW,HIGH, noclip, nonorm:ARM)", _arms_check)
    horizon: int = setting(5, "rollouts each short-horizon branch trains for", at_least(1))
    horizon_states: list = setting([], "the trunk steps (rollouts) a short-horizon branch starts at",
                                   _updates_check_list)
    horizon_eval_problems: int = setting(180, "held-out problems each short-horizon branch is "
                                         "evaluated on", at_least(1))
    horizon_eval_samples: int = setting(4, "sampled responses per problem in that eval", at_least(1))
    dir: str | None = setting(None, "the study's dir (null: runs/microscope/ + the trunk's run dir "
                              "under runs/); the trunk's run dir is its trunk/")

    def to_container(self) -> dict:
        """What the study is: every setting but where it is written."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "dir"}


def parse_microscope(args: list[str]) -> tuple[MicroscopeConfig, list[str]]:
    """(the microscope's settings, the trunk's overrides) from the command line's overrides.
    Raises ConfigError naming the key for an unknown key or a bad value."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    mine = [a for a in args if a.startswith(PREFIX)]
    trunk = [a for a in args if not a.startswith(PREFIX)]
    known = {f.name for f in dataclasses.fields(MicroscopeConfig)}
    values = {}
    for arg in mine:
        key = arg[len(PREFIX):].split("=", 1)[0]
        if key not in known:
            raise ConfigError(f"{PREFIX}{key} is not a microscope setting; known: {sorted(known)}")
        try:
            values.update(OmegaConf.to_container(OmegaConf.from_dotlist([arg[len(PREFIX):]])))
        except OmegaConfBaseException as e:
            raise ConfigError(f"{PREFIX}{key}: cannot read {arg!r} ({e})") from None
    cfg = MicroscopeConfig(**values)
    cfg.arms = [str(a) for a in cfg.arms]
    cfg.horizon_arms = [str(a) for a in cfg.horizon_arms]
    cfg.subset_arms = [str(a) for a in cfg.subset_arms]
    if both := sorted(set(cfg.arms) & set(cfg.subset_arms)):
        raise ConfigError(f"microscope.subset_arms: {both} are in microscope.arms too; name an arm once")
    check_fields(cfg, "microscope")
    if not cfg.arms and not cfg.horizon_arms:
        raise ConfigError("microscope.arms must name at least one arm (or microscope.horizon_arms "
                          "one), e.g. microscope.arms=[ppo,clip_higher,bapo]")
    if bool(cfg.horizon_arms) != bool(cfg.horizon_states):
        raise ConfigError("microscope.horizon_states: short-horizon branches need both "
                          "microscope.horizon_arms and microscope.horizon_states, got "
                          f"{cfg.horizon_arms} and {cfg.horizon_states}")
    return cfg, trunk
