"""A study's dir and everything checked before any work starts.

    <study>/microscope.yaml   the settings, the trunk's overrides, the commit
    <study>/probes.pt         the probes (drawn once)
    <study>/branches.parquet  one row per (rollout, update, arm)
    <study>/trunk/            the trunk: an ordinary run dir (docs/run_dir.md)

A study resumes only with the same settings and the same trunk config (the trunk's run dir
is checked as `python -m src.run` checks it); anything else exits 2 naming the first key
that differs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from src.config import Config, validate
from src.config_fields import ConfigError
from src.microscope.arms import Arm, build_arms
from src.microscope.config import MicroscopeConfig, parse_microscope
from src.microscope.table import read_branches

SETTINGS_FILE = "microscope.yaml"


@dataclass
class Study:
    settings: MicroscopeConfig
    cfg: Config  # the trunk's
    trunk_args: list[str]
    arms: list[Arm]
    horizon_arms: list[Arm]
    dir: Path

    @property
    def trunk_dir(self) -> Path:
        return self.dir / "trunk"


def prepare(args: list[str]) -> Study:
    """The study of the command line's overrides, checked before any work; ConfigError on the
    first problem."""
    from hydra import initialize_config_dir

    from src.committed import committed_dir_message
    from src.lifecycle import check_existing_run, check_run_dir_free
    from src.preflight import (
        CONF_DIR,
        check_evaluates,
        check_machine,
        check_minibatch_holds_a_group,
        check_pair_literals,
        check_writable_dir,
        compose_job,
        job_run_dir,
    )
    from src.run_dir import register_resolver

    settings, trunk_args = parse_microscope(args)
    register_resolver()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        raw = compose_job(trunk_args)
        check_pair_literals(trunk_args, raw)
        cfg = validate(raw)
        check_evaluates(cfg)
        check_minibatch_holds_a_group(cfg)
        check_machine(cfg)
        default = default_study_dir(job_run_dir(raw, False))
        study_dir = Path(settings.dir) if settings.dir else default
        if refusal := committed_dir_message(study_dir, "microscope.dir", default):
            raise ConfigError(refusal)  # committed results are read-only to every runner
        check_writable_dir(study_dir, "microscope.dir")
        others = [a for a in trunk_args if not a.lstrip("+~").startswith(("method=", "method."))]

        def compose(method: str) -> Config:
            try:
                return validate(compose_job([*others, f"method={method}"]))
            except ConfigError as e:
                raise ConfigError(f"microscope.arms: {method!r} is no arm: {e}") from None

        arms = build_arms(settings.arms + settings.subset_arms, cfg, compose)
        horizon_arms = build_arms(settings.horizon_arms, cfg, compose)
    for arm in horizon_arms:
        if arm.kind in ("mask", "zero"):
            raise ConfigError(f"microscope.horizon_arms: {arm.spec} changes one mini-batch's loss, "
                              "not a rule a run can train with; use it in microscope.arms")
    study = Study(settings, cfg, trunk_args, arms, horizon_arms, study_dir)
    check_existing_run(cfg, study.trunk_dir)
    check_run_dir_free(study.trunk_dir)
    check_study_dir(study)
    return study


def study_label(cfg: Config) -> dict:
    """The columns every row of a study carries: where its states come from. `minibatch`
    (responses per update) keeps studies at other batch sizes from pooling."""
    from src.schedule import minibatch_size

    return {"experiment": cfg.experiment.name, "trunk": cfg.method.name, "seed": cfg.seed,
            "minibatch": minibatch_size(cfg.train)}


def default_study_dir(run_dir: Path) -> Path:
    """runs/microscope/<the trunk's run dir under runs/>, or <run dir>-microscope elsewhere."""
    if run_dir.parts and run_dir.parts[0] == "runs":
        return Path("runs", "microscope", *run_dir.parts[1:])
    return run_dir.with_name(f"{run_dir.name}-microscope")


def check_study_dir(study: Study) -> None:
    """An existing study must have these settings and trunk overrides, and a readable table."""
    path = study.dir / SETTINGS_FILE
    if path.exists():
        stored = yaml.safe_load(path.read_text()) or {}
        current = study.settings.to_container()
        for key, value in current.items():
            if stored.get("settings", {}).get(key) != value:
                raise ConfigError(
                    f"microscope.{key}: the study in {study.dir} was made with "
                    f"{stored.get('settings', {}).get(key)!r}, this command gives {value!r}; "
                    "use the same settings to resume it, or another microscope.dir")
    for name in ("branches.parquet", "horizons.parquet"):
        if (study.dir / name).exists():
            read_branches(study.dir / name)


def write_settings(study: Study) -> None:
    """The settings, the trunk's overrides and the commit, on the first start; a resume from
    another commit (a study carried on, docs/microscope.md) adds that commit to `resumed_at`."""
    from src.run_vocab import git_commit

    study.dir.mkdir(parents=True, exist_ok=True)
    path = study.dir / SETTINGS_FILE
    if not path.exists():
        stored = {"settings": study.settings.to_container(),
                  "trunk_overrides": list(study.trunk_args), "commit": git_commit()}
    else:
        stored = yaml.safe_load(path.read_text()) or {}
        commit = git_commit()
        if commit in (stored.get("commit"), *stored.get("resumed_at", [])):
            return
        stored["resumed_at"] = [*stored.get("resumed_at", []), commit]
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(yaml.safe_dump(stored, sort_keys=False))
    tmp.replace(path)


__all__ = ["Study", "default_study_dir", "parse_microscope", "prepare", "study_label",
           "write_settings"]
