"""Every setting has one home: its default, help and check in src/config.py, and every
entry (src.run, the TRL launcher, the verl plug, the benchmarks) builds its config from it."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import yaml

from src.config import Config, ConfigError, to_container
from src.integrations._common import available_methods, resolve_method
from src.run_vocab import flatten
from tests.conftest import REPO, compose

# Keys a group file or an experiment sets by design (the tiny model's shape, the task's own
# parameters, the experiment's label); every other key is at its default in the default run.
GROUP_OWNED = ("method", "experiment", "model.architecture", "model.sft", "task.params")


def _defaults() -> dict:
    return {k: v for k, v in flatten(to_container(Config())).items() if not k.startswith(GROUP_OWNED)}


def _settings(cls: type) -> list[dataclasses.Field]:
    out = []
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            if f.name != "method":  # the method's parameters: setting()s in its own module
                out += _settings(type(default))
        else:
            out.append(f)
    return out


def test_every_setting_has_its_help_text():
    missing = [f.name for f in _settings(Config) if not f.metadata.get("help", "").strip()]
    assert missing == []


def test_the_default_run_is_the_dataclass_defaults():
    ran = flatten(to_container(compose([])))
    assert {k: ran[k] for k in _defaults()} == _defaults()
    # the values `python -m src.run` always used: conf/config.yaml's, now the defaults'
    assert (Config().train.optimizer, Config().train.lr, Config().task.eval_problems) == ("sgd", 0.005, 256)


def test_the_benchmarks_compose_what_src_run_composes():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from gpu_check import compose as bench_compose
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    assert to_container(bench_compose([])) == to_container(compose([]))


@pytest.mark.parametrize("launch", ["trl_grpo.yaml", "trl_grpo_tiny_cpu.yaml"])
def test_the_trl_launcher_fills_what_its_yaml_leaves_out_with_the_same_defaults(launch):
    pytest.importorskip("trl")
    from src.integrations.trl_launch import project_config

    cfg = yaml.safe_load((REPO / "conf" / "integrations" / launch).read_text())
    if cfg["model"].get("kind") == "hf":  # no download: the hub model's config is not read here
        cfg["model"] = {**cfg["model"], "kind": "tiny", "path": None}
    project = project_config(cfg, seed=0, max_new_tokens=32, temperature=1.0, top_p=1.0)
    given = {f"{section}.{k}" for section in ("model", "task", "eval")
             for k in flatten(cfg.get(section) or {})} | {"seed", "cache_dir", "rollout.max_new_tokens"}
    built = flatten(to_container(project))
    assert {k: built[k] for k in _defaults() if k not in given} == {
        k: v for k, v in _defaults().items() if k not in given}
    assert project.task.eval_problems == 256  # 64 before the dataclass default was conf's


@pytest.mark.parametrize("label", available_methods())
def test_the_plugs_resolve_each_method_as_src_run_does(label):
    # the TRL and verl plugs both resolve methods through resolve_method
    assert resolve_method(label).config == compose([f"method={label}"]).method.to_container()


def test_a_settings_own_check_names_its_key():
    with pytest.raises(ConfigError, match=r"^eval\.samples must be >= 1, got 0$"):
        compose(["eval.samples=0"])


@pytest.mark.slow
def test_help_shows_each_settings_help_text():
    proc = subprocess.run([sys.executable, "-m", "src.run", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=True)
    assert "train.lr = 0.005  one rate for every method" in proc.stdout
    assert "task.eval_problems = 256  held-out problems per eval" in proc.stdout

