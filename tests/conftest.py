"""Shared fixtures: a tiny, fast warm-start config and in-process config composition."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from src.pinning import pin_process

# The README's command runs two pytest workers on two cores, each training on torch's 2
# threads, so the cores are always shared. libgomp's default spin (chosen when the load is low,
# as at the session's start) has idle threads fight the other worker for its core, and a
# 2-thread build beside a busy worker took 60 s and 77 CPU-s spinning, 48 s and 47 CPU-s
# passive (benchmarks/README.md, the test suite). Waiting changes no arithmetic. Set before
# the pins, so it is the session's choice ("set by the user") and its subprocesses inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# The test session pins as `python -m src.run` does (src/pinning.py), before any test loads
# torch: the numerics mode, libgomp's wait policy, glibc's malloc. No import of src does it.
pin_process()

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
# TRL's trainer pings the hub from rank 0 (huggingface_hub's send_telemetry: a daemon thread
# making a HEAD request to huggingface.co, alive until the process exits) unless told not to;
# the suite contacts no hub, and its TRL processes inherit this
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

REPO = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(config, items):
    """The slow tests (whole runs and shipped-build rebuilds, up to minutes each) first, the
    longest-first rule for parallel work: under the README's `-n auto --dist loadfile` their
    files are handed out first and the workers share the many short files at the end,
    instead of one worker still running a rebuild that started last while the others wait.
    The order is otherwise kept."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


# A model small enough that its warm start takes seconds; shared by every e2e test.
# 150 SFT steps on 2-term 1-digit sums reach ~35% sampled accuracy, so groups mix.
TINY_MODEL = [
    "model.architecture.hidden_size=64", "model.architecture.num_layers=2",
    "model.architecture.num_heads=2", "model.sft.steps=150", "model.sft.batch_size=32",
    "model.sft.eval_problems=16", "model.sft.eval_samples=1", "model.sft.lr=5e-3",
    "model.architecture.tokenizer_corpus=2000", "model.sft.pack_len=0", "task.params.max_terms=2",
    "task.params.max_digits=1",
]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="session")
def smoke_overrides(cache_dir) -> list[str]:
    return ["experiment=smoke", f"cache_dir={cache_dir}", "logger.progress=false", *TINY_MODEL]


def compose(overrides: list[str]):
    """The validated Config that `python -m src.run <overrides>` would use, with what its
    values need installed checked as a run's preflight does."""
    from src.build import compose_config

    return compose_config(overrides)


def token_rows(run_dir: Path) -> dict[str, list[dict]]:
    """Each token file of a run dir as rows, NaN read as None: `is_weight` is NaN on every
    row of a run without a correction, and NaN != NaN would make two identical runs differ."""
    import math

    import pyarrow.parquet as pq

    def clean(row: dict) -> dict:
        return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}

    return {p.name: [clean(r) for r in pq.read_table(p).to_pylist()]
            for p in sorted((Path(run_dir) / "tokens").glob("*.parquet"))}


def config_error(capsys, call) -> str:
    """`call()` must exit as an entry script does on bad input (src/config_fields.py's config_exit):
    code 2, and stderr's last line the one `config error: ...` line; that line's message."""
    with pytest.raises(SystemExit) as exit_:
        call()
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines and [x for x in lines if x.startswith("config error: ")] == lines[-1:]
    return lines[-1].removeprefix("config error: ")


# Property tests: CI runs a fixed, derandomized set of examples, so a submission cannot
# fail on a draw nobody saw locally; a local run explores new examples each time
# (`HYPOTHESIS_PROFILE=ci` reproduces CI's).
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
_hypothesis_settings.register_profile("explore", print_blob=True)
_hypothesis_settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "explore"))
