"""What every off-policy source is: where a step's training data comes from.

A source is one class in one module of this package, registered with `@register`:

- `name` (the value of `offpolicy.source`), `help` (one line for `--help`) and `rank`
  (where it stands among the sources in `--help` and config.yaml: the next free number);
- `Params`: a dataclass of its parameters, each one `setting(default, help, check)`
  (src/config_fields.py). They are flat keys of the `offpolicy` section
  (`offpolicy.<field>`), null unless the source is chosen: set under another source they
  are an error, and under this one a null takes the setting's default and then its check.
  `check(params, cfg)` holds what reads other sections (raise ConfigError);
- `from_params(params)`: the source, built from its checked parameters;
- `next(gen)`: the step's training data (`StepData`), or None when the source has nothing
  to train on at this step (the step only generates). `gen` (src/generation.py) is the
  step's generation: rollouts sampled, scored and rewarded by the current weights, the
  behaviour pass of a rollout trained later, responses continued;
- `telemetry(step, trained)`: the step record's fields about the data (its rollouts'
  slots, ages and versions; what the source holds);
- `state_dict` / `load_state_dict` / `in_flight`: what a checkpoint carries, so a resumed
  run trains on exactly what it would have;
- `on_policy`: every step trains on data its own start weights generated (the anchors then
  equal `coupled`).

A rollout's slot is the step whose problems and sampling seed it holds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from src.config_fields import ConfigError, check_fields
from src.schedule.stored import StoredRollout

SOURCES: dict[str, type[Source]] = {}


def register(cls: type[Source]) -> type[Source]:
    SOURCES[cls.name] = cls
    ordered = sorted(SOURCES.values(), key=lambda c: c.rank)
    SOURCES.clear()
    SOURCES.update((c.name, c) for c in ordered)
    return cls


@dataclass
class SourceParams:
    """Base of every source's parameters (none: the fresh source)."""


def required(source: str, what: str, then=None):
    """The check of a parameter that has no default: it must be set under `source`."""
    def check(value: Any) -> str | None:
        if value is None:
            return f"must be set with offpolicy.source={source}: {what}"
        return then(value) if then is not None else None
    return check


@dataclass
class StepData:
    """What a step trains on: `trained`, in order, and `generated`, the rollout the current
    weights made this step (the step record's rewards, accuracy and readings are its)."""

    generated: StoredRollout
    trained: list[StoredRollout]


class Generation(Protocol):
    """What a source may ask for at one step (src/generation.py implements it): the config,
    task and tokenizer, the step and the current weights' version, the step's seeds, a
    slot's rollout (sampled, scored, rewarded), the behaviour pass of a rollout a later step
    trains on, and the parts a source that generates otherwise builds on."""

    cfg: Any
    task: Any
    tokenizer: Any
    step: int
    version: int

    def seed(self, offset: int) -> int: ...
    def rollout(self, slot: int) -> StoredRollout: ...
    def behaviour_now(self, stored: StoredRollout) -> None: ...
    def sample(self, slot: int, max_new_tokens: int) -> tuple[list, Any]: ...
    def continue_responses(self, contexts: list, caps: list[int], seed: int) -> list: ...
    def score(self, data: Any) -> tuple[Any, Any]: ...
    def reward(self, slot: int, data: Any, scores: Any, version: int, **stored) -> StoredRollout: ...


def rollout_fields(step: int, trained: list[StoredRollout]) -> dict[str, list[int]]:
    """The slots, ages (steps since generation) and versions of the rollouts trained on."""
    return {"rollout_slots": [r.slot for r in trained],
            "rollout_ages": [step - r.generated_at for r in trained],
            "rollout_versions": [r.version for r in trained]}


class Source:
    name: ClassVar[str]
    help: ClassVar[str] = ""
    rank: ClassVar[int] = 0
    Params: ClassVar[type[SourceParams]] = SourceParams
    # Whether its rollouts keep the sampler's own log-prob of every token (`Rollout.sampler_logp`):
    # the mismatch corrections (src/corrections/) read them. A source that rebuilds responses
    # without them sets False, and a run asking it for a correction stops before any work.
    sampler_logprobs: ClassVar[bool] = True
    # Whether a rollout comes whole from `Generation.rollout`, one policy version per response,
    # so that rollout.behaviour=sampler can store the sampler's numbers as its behaviour pass.
    # A source that builds responses across versions sets False, and the config refuses it.
    whole_rollouts: ClassVar[bool] = True

    @classmethod
    def from_params(cls, params: SourceParams) -> Source:
        return cls()

    @classmethod
    def check(cls, params: SourceParams, cfg) -> None:
        """Checks that read other config sections (the fields' own checks ran before)."""

    @property
    def on_policy(self) -> bool:
        return False

    def next(self, gen: Generation) -> StepData | None:
        raise NotImplementedError

    def telemetry(self, step: int, trained: list[StoredRollout]) -> dict:
        return rollout_fields(step, trained)

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def in_flight(self) -> list:
        """What is held for later steps (what a checkpoint carries)."""
        return []


def param_names(source: type[Source]) -> list[str]:
    return [f.name for f in dataclasses.fields(source.Params)]


def checked_params(offpolicy, cfg) -> SourceParams:
    """The chosen source's parameters from the flat `offpolicy` section: a key of another
    source is an error, a null takes its default, then each field's check and the source's
    own. The defaults are written back, so config.yaml holds what the run used."""
    for name, other in SOURCES.items():
        for key in param_names(other):
            if name != offpolicy.source and getattr(offpolicy, key) is not None:
                raise ConfigError(f"offpolicy.{key} belongs to offpolicy.source={name}, but the "
                                  f"source is {offpolicy.source}; drop offpolicy.{key} or set "
                                  f"offpolicy.source={name}")
    cls = SOURCES[offpolicy.source]
    given = {key: getattr(offpolicy, key) for key in param_names(cls)}
    params = cls.Params(**{k: v for k, v in given.items() if v is not None})
    check_fields(params, "offpolicy")
    cls.check(params, cfg)
    for key in given:
        setattr(offpolicy, key, getattr(params, key))
    return params
