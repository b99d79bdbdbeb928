"""Everything checked before Hydra makes anything on disk, for one run or every job of a sweep.

Each job of a multirun is expanded with Hydra's own sweeper rules (`BasicSweeper`), then
composed, validated, checked against this machine (device, rollout engine, task data) and
against its run dir (another job's, or an existing run made with another config). The first
problem exits with code 2 and one line, `config error: <key> ...`; no run dir, no
`multirun.yaml` and no warm start is made.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

import src.compose  # noqa: F401 - every registry loaded, the defaults given to Hydra
from src.committed import committed_dir_message
from src.config import Config, ConfigError, validate
from src.eval_schedule import eval_steps
from src.lifecycle import check_existing_run, check_run_dir_free
from src.run_dir import register_resolver, run_tag
from src.updates import minibatch_count, minibatch_size

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
MULTIRUN_FLAGS = ("-m", "--multirun")
_checked_tasks: set[str] = set()


def is_hydra_override(arg: str) -> bool:
    return arg.lstrip("+~").startswith(("hydra.", "hydra/"))


def check_run(overrides: list[str], multirun: bool) -> list[tuple[DictConfig, Config]]:
    """Raise ConfigError for the first job (of one, or of the sweep) that cannot run; else
    each job's composed config and its validated Config, in order."""
    from hydra import initialize_config_dir

    register_resolver()  # the run dir's ${run_tag:...}
    hydra_args = [a for a in overrides if is_hydra_override(a)]
    task_args = [a for a in overrides if not is_hydra_override(a)]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        jobs = expand_sweep(task_args) if multirun else [task_args]
        dirs: dict[Path, int] = {}
        warned: set[str] = set()
        checked: list[tuple[DictConfig, Config]] = []
        for i, job in enumerate(jobs):
            where = f" (multirun job {i + 1} of {len(jobs)}: {' '.join(job)})" if multirun else ""
            try:
                raw = compose_job(job + hydra_args)
                check_pair_literals(job, raw)
                cfg = validate(raw)
                check_evaluates(cfg)
                check_minibatch_holds_a_group(cfg)
                run_dir = job_run_dir(raw, multirun)
                dir_key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
                refusal = committed_dir_message(run_dir, dir_key, default_run_dir(raw, multirun))
                if refusal:  # before anything is probed or locked there
                    raise ConfigError(refusal)
                if run_dir in dirs:
                    raise ConfigError(
                        f"hydra.sweep.subdir: jobs {dirs[run_dir] + 1} and {i + 1} of this "
                        f"multirun would both write {run_dir}; they differ only in keys "
                        "that change no number (src/run_dir.py), so sweep something else")
                dirs[run_dir] = i
                check_machine(cfg)
                check_writable_dir(Path(cfg.cache_dir), "cache_dir")
                check_writable_dir(run_dir, dir_key)
                check_existing_run(cfg, run_dir)  # src/lifecycle.py: may it skip or resume
                check_run_dir_free(run_dir)  # and is no other process in it
                for warning in (eval_size_warning(cfg), eval_spacing_warning(cfg),
                                small_minibatch_warning(cfg)):
                    if warning and warning not in warned:
                        print(f"warning: {warning}", file=sys.stderr)
                        warned.add(warning)
                checked.append((raw, cfg))
            except ConfigError as e:
                raise ConfigError(f"{e}{where}") from None
    return checked


# Keys that take a 'lo_hi' pair: on the command line Hydra reads 0.5_2 as the number 0.52
# and 0_3 as 3 (underscores separate digits), which would pass as a one-number threshold.
PAIR_KEYS = ("correction.rollout_is_threshold", "correction.rollout_rs_threshold")


def check_pair_literals(args: list[str], raw: DictConfig) -> None:
    """A 'lo_hi' override that Hydra composed into a number is an error, before validation."""
    for arg in args:
        key, _, value = arg.lstrip("+~").partition("=")
        composed = OmegaConf.select(raw, key) if key in PAIR_KEYS else None
        if "_" in value and composed is not None and not isinstance(composed, str):
            raise ConfigError(f"{key}={value}: Hydra reads it as the number {composed}; write "
                              f"each bound of a 'lo_hi' pair with a decimal point (e.g. 0.5_2.0) "
                              f"or quote it ('{key}=\"{value}\"')")


def expand_sweep(task_args: list[str]) -> list[list[str]]:
    """The jobs of `-m a=1,2 b=x`: Hydra's BasicSweeper rules, in its order."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
        (jobs,) = BasicSweeper.split_arguments(parser.parse_overrides(task_args), None)
    except Exception as e:  # syntax errors, unsupported sweep types
        raise ConfigError(hydra_message(str(e), task_args)) from None
    return jobs


def compose_job(overrides: list[str]) -> DictConfig:
    from hydra import compose

    try:
        return compose(config_name="config", overrides=overrides, return_hydra_config=True)
    except Exception as e:  # Hydra's own errors: unknown group option, typo'd key, bad syntax
        raise ConfigError(hydra_message(str(e), overrides)) from None


def default_run_dir(raw: DictConfig, multirun: bool) -> Path:
    """Where the job goes when neither hydra.run.dir nor hydra.sweep.dir is given: the run
    dir of conf/config.yaml (its sweep dir, runs/, for a multirun)."""
    if multirun:
        return Path("runs")
    tag = run_tag(str(raw.hydra.job.override_dirname))
    return Path("runs") / str(raw.experiment.name) / str(raw.method.name) / f"{tag}seed{raw.seed}"


def job_run_dir(raw: DictConfig, multirun: bool) -> Path:
    if multirun:
        return Path(str(raw.hydra.sweep.dir)) / str(raw.hydra.sweep.subdir)
    return Path(str(raw.hydra.run.dir))


# -- this machine ------------------------------------------------------------------------


def check_numerics(cfg: Config) -> None:
    """The config's numerics mode must be the one torch loaded in: a yaml (smol_4x_bf16's
    `numerics: native`) cannot switch it, only the command line or the environment can."""
    from src._numerics import ENV_MODE, active_mode

    if cfg.numerics != active_mode():
        raise ConfigError(
            f"numerics: the config says {cfg.numerics!r} but torch loaded in {active_mode()!r} "
            "mode, and the instruction set is fixed when torch loads; give "
            f"numerics={cfg.numerics} on the command line or set {ENV_MODE}={cfg.numerics}, "
            "not in a yaml")


def check_machine(cfg: Config) -> None:
    """What the values alone cannot show: the packages they need, the numerics mode torch
    loaded in, the device, the rollout engine, the task's data."""
    check_installed(cfg)
    check_numerics(cfg)
    if cfg.device.startswith("cuda"):
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(cfg.device.split(":")[1]) if ":" in cfg.device else 0
        if index >= count:
            seen = f"{count} CUDA device(s)" if count else "no CUDA device"
            raise ConfigError(f"device={cfg.device}: torch {torch.__version__} sees {seen} on this "
                              "machine; use device=cpu (or device=auto)")
    if cfg.rollout.backend == "vllm":
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            raise ConfigError("rollout.backend=vllm needs the vllm package, which is not "
                              "installed here (docs/gpu.md); use rollout=hf")
    _check_task_data(cfg)


def check_installed(cfg: Config) -> None:
    """What the config's values need installed here: a `package:` model's package and the
    GGUF reader, peft for LoRA, a sampler precision this device runs, inductor's compiler.
    (tests/conftest.py `compose` runs it too, as a run would.)"""
    from src.models.packaged import has_module

    _check_packaged(cfg.model)
    if cfg.model.lora_r and not has_module("peft"):
        raise ConfigError(f"model.lora_r={cfg.model.lora_r} needs the peft package, which is not "
                          "installed; install it with: pip install peft")
    _check_precision_runs(cfg)
    _check_compile(cfg)


def _check_packaged(m) -> None:
    """A `package:` path's package and a GGUF file's reader are installed, and the file is
    there; each missing piece names `model.install`, the line that installs it."""
    from src.models.packaged import PACKAGE_PREFIX, has_module, is_packaged, package_dir

    if m.kind != "hf":
        return
    how = f"; install it with: {m.install}" if m.install else ""
    where = m.path
    if is_packaged(m.path):
        module = m.path[len(PACKAGE_PREFIX):]
        found = package_dir(module)
        if found is None:
            raise ConfigError(f"model.path={m.path}: the Python package {module!r} is not "
                              f"installed{how}")
        where = str(found)
    if m.gguf_file is None:
        return
    if not has_module("gguf"):
        raise ConfigError(f"model.gguf_file={m.gguf_file} needs the gguf package, which is not "
                          f"installed{how or '; install it with: pip install gguf'}")
    if Path(where).expanduser().is_dir() and not (Path(where).expanduser() / m.gguf_file).is_file():
        raise ConfigError(f"model.gguf_file={m.gguf_file}: no such file in {where}")


def _check_precision_runs(cfg: Config) -> None:
    """rollout.precision tried on this device (the hf backend's sampler copy; vLLM's engine
    checks its own)."""
    precision = cfg.rollout.precision
    if cfg.rollout.backend == "vllm" or precision == "fp32":
        return
    from src.device import pick_device
    from src.rollout.sampler_precision import runs_on

    try:
        problem = runs_on(pick_device(cfg.device), precision)
    except RuntimeError as e:
        problem = str(e)
    if problem is not None:
        raise ConfigError(f"rollout.precision ={precision}: {problem}")


def _check_compile(cfg: Config) -> None:
    """train.compile=inductor builds kernels at the first scoring pass: on a CPU with the C++
    compiler inductor looks for, on a GPU with triton. Without one, torch fails minutes into
    the run."""
    if cfg.train.compile != "inductor":
        return
    from src.device import pick_device
    from src.models.packaged import has_module

    if pick_device(cfg.device).type == "cuda":
        if not has_module("triton"):
            raise ConfigError("train.compile =inductor on a GPU needs the triton package, which "
                              "is not installed; install it or use train.compile=none")
        return
    from torch._inductor import config as inductor_config
    from torch._inductor.cpp_builder import get_cpp_compiler
    from torch._inductor.exc import InvalidCxxCompiler

    try:  # inductor's own search: $CXX, else g++ (torch._inductor.config.cpp.cxx)
        get_cpp_compiler()
    except InvalidCxxCompiler:
        searched = [x for x in inductor_config.cpp.cxx if x]
        raise ConfigError(f"train.compile =inductor on the CPU needs a C++ compiler; none of "
                          f"{searched} runs: install one (Debian: apt install g++), name it in "
                          "$CXX, or use train.compile=none") from None


def check_writable_dir(path: Path, key: str) -> None:
    """`path` is a dir this process can write, or one it can make: probed with a temporary
    dir in its nearest existing ancestor (removed at once), since permissions alone do not
    tell (root, read-only mounts, /proc)."""
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{key}={path} is a file, not a dir; point it at a dir")
    ancestor = path
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ConfigError(f"{key}={path}: {ancestor} is a file, so the dir cannot be made there")
    try:
        tempfile.TemporaryDirectory(dir=ancestor, prefix=".write-probe-").cleanup()
    except OSError as e:
        raise ConfigError(f"{key}={path}: cannot write in {ancestor} ({e.strerror or e}); "
                          "point it somewhere writable") from None


# -- what the values allow but no run should do ----------------------------------------------

# A timing run (benchmarks/) measures training alone and sets this to run without evals.
ENV_NO_EVAL = "REPRO_NO_EVAL"


def check_evaluates(cfg: Config) -> None:
    """A run with neither eval gives no held-out number: refused, but for timing runs."""
    if cfg.eval.greedy or cfg.eval.sampled or os.environ.get(ENV_NO_EVAL) == "1":
        return
    raise ConfigError("eval.greedy=false and eval.sampled=false: the run would evaluate nothing, "
                      "so it gives no held-out accuracy to read; turn one on (eval.sampled=true "
                      f"or eval.greedy=true); a timing run that wants no evals sets {ENV_NO_EVAL}=1")


def check_minibatch_holds_a_group(cfg: Config) -> None:
    """An update on fewer responses than one prompt group is refused. Why a group: the
    advantages are centred within each group of train.group_size responses (they sum to
    zero there), and train.minibatch_split=groups deals whole groups, so a group is the
    smallest set that carries both signs by construction. A smaller mini-batch holds a few
    responses of different groups: often all of one sign, or all of zero advantage (a group
    all right or all wrong), which makes an update of no use or of no gradient at all."""
    t = cfg.train
    size = minibatch_size(t)
    if size >= t.group_size:
        return
    raise ConfigError(
        f"train.staleness={t.staleness}: each update would train on {size} response(s) (the "
        f"rollout's {t.prompts_per_step}x{t.group_size} split {minibatch_count(t)} ways), fewer "
        f"than one prompt group (train.group_size={t.group_size}); advantages are centred "
        "within a group, so updates this small are often of one sign or have no gradient at "
        f"all; use train.staleness<={t.prompts_per_step} (one group per update at least), "
        "raise train.prompts_per_step, or use train.staleness_mode=fixed_update")


def small_minibatch_warning(cfg: Config) -> str | None:
    """A line when an update holds fewer than two groups' worth of responses: allowed (a
    whole group's signs balance), but one group's luck decides each update."""
    t = cfg.train
    size = minibatch_size(t)
    if size >= 2 * t.group_size:
        return None
    return (f"train.staleness={t.staleness}: each update trains on {size} responses, under two "
            f"prompt groups' worth (train.group_size={t.group_size}), so a single group's signs "
            "set the direction of each update; expect noisy updates")


# About 11 ms per response at the default tiny size on 2 CPU cores: the warm start's eval of
# 256 problems x (1 greedy + 4 sampled) responses took 14 s (src/warm_start/).
SECONDS_PER_RESPONSE = 0.011
SLOW_EVAL_SECONDS = 300


def eval_size_warning(cfg: Config) -> str | None:
    """A line when one held-out eval of the tiny model would take minutes, with its estimate."""
    if cfg.model.kind != "tiny":
        return None
    per_problem = int(cfg.eval.greedy) + (cfg.eval.samples if cfg.eval.sampled else 0)
    responses = cfg.task.eval_problems * per_problem
    seconds = responses * SECONDS_PER_RESPONSE
    if seconds < SLOW_EVAL_SECONDS:
        return None
    evals = len(eval_steps(cfg.eval, cfg.train.steps))  # step 0, the schedule, the end
    return (f"task.eval_problems={cfg.task.eval_problems}: each of the run's {evals} evals "
            f"generates {responses} responses, about {_duration(seconds)} each at the default "
            "model size on 2 CPU cores (a progress bar shows it); the default is 256")


def eval_spacing_warning(cfg: Config) -> str | None:
    """A line when the run's end is off its eval grid: the trainer evaluates every
    eval.every steps and at the end, so the last two evals would sit a few steps apart and the
    final accuracy (the mean of the last three evals, docs/statistics.md) would weigh the end
    twice. Evals belong at fixed update intervals."""
    steps, every = cfg.train.steps, cfg.eval.every
    if cfg.eval.at is not None or steps % every == 0:  # eval.at: the steps are the user's own
        return None
    return (f"eval.every={every} does not divide train.steps={steps}: the last eval (step "
            f"{steps}) falls {steps % every} step(s) after the one at step {steps - steps % every}, "
            "so the final accuracy (the mean of the last three evals) weighs the run's end "
            "twice; make train.steps a multiple of eval.every")


def _duration(seconds: float) -> str:
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _check_task_data(cfg: Config) -> None:
    """Build the task once per distinct config: dataset tasks read their files here."""
    import json

    from src.tasks import get_task

    key = json.dumps([cfg.task.name, dict(cfg.task.params)], sort_keys=True, default=str)
    if key in _checked_tasks:
        return
    hub_logger = logging.getLogger("huggingface_hub")
    level = hub_logger.level
    hub_logger.setLevel(logging.ERROR)  # its retry warnings would bury the one-line error
    try:
        get_task(cfg.task.name, **dict(cfg.task.params))
    except (ValueError, TypeError, KeyError, ImportError, OSError) as e:
        message = str(e).strip("'\"")  # a KeyError's text comes quoted
        raise ConfigError(message if message.startswith("task.") else f"task.params: {message}") from None
    finally:
        hub_logger.setLevel(level)
    _checked_tasks.add(key)


# -- Hydra's messages ------------------------------------------------------------------------


def hydra_message(text: str, overrides: list[str]) -> str:
    """Hydra's multi-line errors as one line that starts with the key."""
    text = " ".join(text.split("Config search path")[0].split())
    missing = re.search(r"Could not find '([\w/]+)/([^']+)'.*?Available options in '[\w/]+': (.*)", text)
    if missing:
        group, option, choices = missing.groups()
        return f"{group.replace('/', '.')}: unknown option {option!r}; choose one of: {choices.strip()}"
    typo = re.search(r"Could not override '([^']+)'", text)
    if typo:
        return unknown_key_message(typo.group(1), overrides)
    return text


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def unknown_key_message(key: str, overrides: list[str]) -> str:
    """Name the options of the key's config group that have it, if it is not a typo.

    `method.bapo.rho0` under `method=ppo`: bapo, bapo_official and bapo_value have it. Found
    by composing each option of the group (so inherited keys count), only on this error path.
    """
    from hydra import compose

    group = key.split(".")[0]
    generic = f"{key}: no such key; check the spelling (`--cfg job` lists every key)"
    options = group_options(group) if "." in key else []
    if not options:
        return generic
    others = [o for o in overrides if o.lstrip("+~").split("=")[0] != key]
    try:
        composed = compose(config_name="config", overrides=others, return_hydra_config=True)
        current = composed.hydra.runtime.choices[group]
    except Exception:  # the rest of the command is broken too: say what we know
        return generic
    moved = _method_param_key(key, composed)
    if moved:
        return (f"{key}: the method's parameters live under method.<objective>; "
                f"use {moved}")
    method_key = group == "method" and len(key.split(".")) == 3  # method.<section>.<param>
    if method_key:
        early = _method_counterpart_message(key, composed)
        if early:
            return early
    owners = []
    for option in options:
        try:
            cfg = compose(config_name="config", overrides=[f"{group}={option}"])
        except Exception:  # an option that does not compose alone (a partial file)
            continue
        if OmegaConf.select(cfg, key, default=_MISSING) is not _MISSING:
            owners.append(option)
    if method_key:
        owners.sort(key=lambda o: (o != key.split(".")[1], o))  # `ppo` first for method.ppo.*
        if not owners:
            return _param_owners_message(key, composed, options) or generic
    if not owners or current in owners:
        return generic
    also = f" (also {', '.join(owners[1:])})" if len(owners) > 1 else ""
    return (f"{key}: not a key of {group}={current}; it belongs to {group}={owners[0]}{also}; "
            f"select it with {group}={owners[0]}")


_MISSING = object()
# The same role under another name: bapo's search starts from its clip bounds.
COUNTERPARTS = {("bapo", "c_low"): "low_start", ("bapo", "c_high"): "high_start"}


def _method_counterpart_message(key: str, composed: DictConfig) -> str | None:
    """`method.<section>.<param>` where the selected method has `param` in its own section,
    or a parameter in the same role under another name (COUNTERPARTS): name that key."""
    _, section, param = key.split(".")
    current = composed.hydra.runtime.choices["method"]
    objective = OmegaConf.select(composed, "method.objective", default=None)
    if OmegaConf.select(composed, f"method.{objective}.{param}", default=_MISSING) is not _MISSING:
        return (f"{key}: method={current}'s parameters live under method.{objective}; "
                f"use method.{objective}.{param}")
    counterpart = COUNTERPARTS.get((objective, param))
    if counterpart:
        return (f"{key}: method={current} has no {param}; its counterpart is "
                f"method.{objective}.{counterpart} (or select method={section} to set {key})")
    return None


def _param_owners_message(key: str, composed: DictConfig, options: list[str]) -> str | None:
    """`method.ppo.rho0`: no method has that exact key, but some own `rho0` in their own
    section; name them and the key to use."""
    from hydra import compose

    param = key.split(".")[2]
    current = composed.hydra.runtime.choices["method"]
    owners = []
    for option in options:
        try:
            cfg = compose(config_name="config", overrides=[f"method={option}"])
        except Exception:  # an option that does not compose alone
            continue
        own = OmegaConf.select(cfg, "method.objective", default=None)
        if OmegaConf.select(cfg, f"method.{own}.{param}", default=_MISSING) is not _MISSING:
            owners.append((option, own))
    if not owners:
        return None
    option, own = owners[0]
    also = f" (also {', '.join(o for o, _ in owners[1:])})" if len(owners) > 1 else ""
    return (f"{key}: method={current} has no parameter {param}; {param} belongs to "
            f"method={option}{also}: use method={option} method.{own}.{param}=...")


def _method_param_key(key: str, composed: DictConfig) -> str | None:
    """`method.c_low` (the layout before methods owned their parameters) -> the key it is
    now, `method.ppo.c_low`, when the selected method has that parameter."""
    parts = key.split(".")
    if len(parts) != 2 or parts[0] != "method":
        return None
    objective = OmegaConf.select(composed, "method.objective", default=None)
    moved = f"method.{objective}.{parts[1]}"
    return moved if OmegaConf.select(composed, moved, default=_MISSING) is not _MISSING else None
