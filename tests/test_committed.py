"""src/committed.py: committed results are read-only to the runner, and a finished run is
placed against the committed seeds of its cell; src/lifecycle.py's summary says both."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from src import committed
from src.config_fields import ConfigError
from src.lifecycle import LOCK_NAME, open_run_dir, summary_lines
from tests.conftest import REPO, compose


def _write_run(run_dir: Path, config: dict, greedy: list[float], *, samples: int = 4,
               rewards: tuple[float, ...] = (0.5,), meta: dict | None = None) -> Path:
    """A finished run dir: config.yaml, evals at steps 0, 10, 20, ... with these greedy
    accuracies, a step record per reward."""
    run_dir.mkdir(parents=True)
    config = {**config, "eval": {**config.get("eval", {}), "samples": samples}}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    records = [{"kind": "eval", "step": 10 * i, "greedy_accuracy": g, "sampled_accuracy": g / 2,
                "n_problems": 64} for i, g in enumerate(greedy)]
    records += [{"kind": "step", "step": i, "reward_mean": r} for i, r in enumerate(rewards)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run_dir / "meta.json").write_text(json.dumps(meta or {}))
    return run_dir


def _config(seed: int, threads: int = 1, lr: float = 0.005) -> dict:
    return {"experiment": {"name": "staleness_4x"}, "method": {"name": "bapo"},
            "seed": seed, "train": {"threads": threads, "lr": lr}}


def test_a_finished_run_is_placed_against_its_cells_committed_seeds(tmp_path, monkeypatch):
    experiments = tmp_path / "experiments"
    cell = experiments / "paper_grid" / "staleness_4x" / "bapo" / "train.threads=1"
    seeds = {0: [0.43, 0.40, 0.38, 0.36, 0.35], 1: [0.43, 0.42, 0.41, 0.40, 0.42],
             2: [0.43, 0.30, 0.36, 0.37, 0.38]}
    for seed, greedy in seeds.items():
        _write_run(cell / f"seed{seed}", _config(seed), greedy)
    # another cell of the same experiment and method, made with another rate: not this cell
    _write_run(experiments / "other" / "staleness_4x" / "bapo" / "train.lr=0.01" / "seed0",
               _config(0, lr=0.01), [0.43, 0.9, 0.9, 0.9])
    # the final accuracy: the mean of the last three evals after step 0, per seed, by hand
    finals = [(0.38 + 0.36 + 0.35) / 3, (0.41 + 0.40 + 0.42) / 3, (0.36 + 0.37 + 0.38) / 3]
    low, high = min(finals), max(finals)
    # a run of the quick start: 2 threads (the default) and another seed, ending at 0.301
    run = _write_run(tmp_path / "runs" / "seed3", _config(3, threads=2),
                     [0.43, 0.35, 0.31, 0.30, 0.293])
    mine = (0.31 + 0.30 + 0.293) / 3
    monkeypatch.setattr(committed, "REPO", tmp_path)
    lines = committed.placement_lines(run, experiments)
    assert lines == [
        f"  committed seeds of this cell ({cell.relative_to(tmp_path)}, 3 seeds) end at greedy "
        f"{low:.3f}..{high:.3f}, all below their start of 0.430 (mean of the last 3 evals); this run's "
        f"{mine:.3f} is outside their range"]
    inside = _write_run(tmp_path / "runs" / "seed4", _config(4), [0.43, 0.4, 0.39, 0.38, 0.37])
    assert lines[0].replace(f"{mine:.3f} is outside", f"{0.38:.3f} is inside") == \
        committed.placement_lines(inside, experiments)[0]
    # a cell whose seeds end on both sides of the warm start is said to end around it
    shutil.rmtree(cell / "seed1")
    _write_run(cell / "seed1", _config(1), [0.43, 0.5, 0.5, 0.5, 0.5])
    assert f"end at greedy {low:.3f}..0.500, around their start of 0.430 (" in \
        committed.placement_lines(run, experiments)[0]
    # a config no committed cell was made with: nothing to place it against
    alone = _write_run(tmp_path / "runs" / "lr", _config(0, lr=0.02), [0.43, 0.4, 0.4, 0.4])
    assert committed.placement_lines(alone, experiments) == []


def test_the_summary_counts_samples_names_the_reward_and_marks_a_smoke_run(tmp_path):
    config = {"experiment": {"name": "smol_smoke"}, "method": {"name": "ppo"}, "seed": 0}
    run = _write_run(tmp_path / "run", config, [0.25, 0.5], samples=1, rewards=(0.25, 0.75),
                     meta={"wall_time_s": 12.34})
    lines = summary_lines(run)
    assert lines[1] == ("  experiment=smol_smoke is a smoke run: it checks that the pipeline "
                        "runs end to end; its numbers are not results")
    assert lines[2] == "  held-out accuracy, 64 problems, 1 sample per problem: step 0 -> step 10"
    assert "  final reward: 0.500 (the training rollouts' mean reward, averaged over the last "\
           "2 steps)" in lines
    assert not any("samples" in line or "reward_mean" in line for line in lines)
    other = _write_run(tmp_path / "run2", {**config, "experiment": {"name": "smol_4x"}},
                       [0.25, 0.5], samples=2, rewards=(0.5,))
    lines = summary_lines(other)
    assert lines[1] == "  held-out accuracy, 64 problems, 2 samples per problem: step 0 -> step 10"
    assert not any("smoke" in line for line in lines)
    assert "  final reward: 0.500 (the training rollouts' mean reward, averaged over the last "\
           "step)" in lines


def test_the_quick_starts_cell_is_found_among_the_committed_results():
    # `python -m src.run experiment=staleness_4x method=bapo` (2 threads by default) belongs
    # to paper_grid's cell, made with train.threads=1 (threads reach only the sampler's log-probs)
    from src.config import to_container
    from src.run_vocab import upgrade_config

    config = upgrade_config(to_container(compose(["experiment=staleness_4x", "method=bapo"])))
    cells = committed.committed_cells(config)
    cell = REPO / "experiments" / "paper_grid" / "staleness_4x" / "bapo" / "train.threads=1"
    assert cell in cells and cells[cell] == sorted(cell.glob("seed*"))


def test_committed_dirs_are_refused_with_or_without_git(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    cell = repo / "experiments" / "grid" / "staleness_4x" / "bapo" / "seed0"
    cell.mkdir(parents=True)
    reference = repo / "tests" / "data" / "reference_run"
    reference.mkdir(parents=True)
    (reference / "metrics.jsonl").write_text("{}\n")
    (repo / "runs").mkdir()
    # no git: the experiments/ location alone decides, existing or not
    monkeypatch.setattr(committed.shutil, "which", lambda name: None)
    assert committed.committed_root(cell, repo) == repo / "experiments" / "grid"
    assert committed.committed_root(repo / "experiments" / "new" / "seed0", repo) == \
        repo / "experiments" / "new"
    assert committed.committed_root(reference, repo) is None
    assert committed.committed_root(repo / "runs", repo) is None
    assert committed.runs_path_for(cell, repo) == Path("runs/grid/staleness_4x/bapo/seed0")
    monkeypatch.undo()
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the tracked-dir rule is not checked")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "tests"], check=True)
    assert committed.committed_root(reference, repo) == reference.resolve()
    assert committed.committed_root(repo / "runs", repo) is None  # nothing tracked there


def test_a_committed_run_dir_gets_no_lock_file(tmp_path):
    cell = REPO / "experiments" / "paper_grid" / "staleness_4x" / "bapo" / "train.threads=1" / "seed0"
    before = sorted(p.name for p in cell.iterdir())
    cfg = compose(["experiment=staleness_4x", "method=bapo", "train.threads=1", "overwrite=true"])
    with pytest.raises(ConfigError) as refused:
        open_run_dir(cfg, cell)
    assert str(refused.value).startswith(f"hydra.run.dir={cell} lies in committed results "
                                         "(experiments/paper_grid)")
    assert not (cell / LOCK_NAME).exists() and sorted(p.name for p in cell.iterdir()) == before
