"""Sweeps through Hydra's launchers (experiments/run_sweep.py): joblib workers and submitit's
local executor, on smoke-sized runs.

Parallel is as safe as sequential: every job is checked before the first starts, two jobs
that would share a run dir are refused, a failed job does not stop the others and the
summary names it, a rerun skips finished runs and resumes unfinished ones. A run launched
through a launcher has the same metrics and token rows, bit for bit, as the same run alone
with the same train.threads. wandb (offline) groups the sweep's runs by cell.
"""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import run_sweep
from tests.conftest import REPO, config_error, token_rows

pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
pytest.importorskip("hydra_plugins.hydra_submitit_launcher")

# Three jobs: two good runs and one whose learning rate blows it up at its second update
# (numeric fault, exit 3), so the sweep has a failure to survive and name.
GOOD, OTHER = "train.lr=0.005", "train.lr=0.004"
SWEPT = "train.lr=0.005,0.004,1e30"
SHARED = ["method=ppo", "train.steps=2", "train.threads=1", "train.max_bad_updates=1"]


@pytest.fixture(scope="module")
def overrides(tmp_path_factory) -> list[str]:
    from tests.conftest import TINY_MODEL

    cache = tmp_path_factory.getbasetemp() / "launcher_cache"
    return ["experiment=smoke", f"cache_dir={cache}", *TINY_MODEL, *SHARED]


def sweep_command(overrides: list[str], sweep_dir: Path, *more: str) -> list[str]:
    return [sys.executable, "-m", "src.run", "-m", SWEPT, *overrides,
            f"hydra.sweep.dir={sweep_dir}", *more]


def launch(name: str, launcher: str, overrides: list[str], sweep_dir: Path, *more: str):
    """(exit code, printed progress and summary) of a sweep through `launcher`."""
    kind = run_sweep.choose_launcher(launcher, 2, None, [*overrides, *more])
    cmd = sweep_command(overrides, sweep_dir, *more, *kind.overrides)
    run_sweep.check_all([cmd])
    out = io.StringIO()
    code = run_sweep.run_sweep(name, [cmd], kind, out=out)
    return code, out.getvalue()


def run_dirs(sweep_dir: Path) -> dict[str, Path]:
    """{"good" | "other" | "bad": run dir} of the three jobs."""
    out = {}
    for meta in sweep_dir.glob("smoke/ppo/*/seed0/meta.json"):
        lr = next(o for o in json.loads(meta.read_text())["overrides"] if o.startswith("train.lr="))
        out["good" if lr == GOOD else "other" if lr == OTHER else "bad"] = meta.parent
    return out


def status(run_dir: Path) -> str:
    return json.loads((run_dir / "status.json").read_text())["status"]


def metrics(run_dir: Path) -> list[dict]:
    """metrics.jsonl without its timings (wall-clock, not numbers of the run)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time_")} for r in rows]


@pytest.fixture(scope="module")
def alone(tmp_path_factory, overrides) -> Path:
    """The good job, launched alone with the same train.threads."""
    run_dir = tmp_path_factory.mktemp("alone") / "run"
    cmd = [sys.executable, "-m", "src.run", GOOD, *overrides, "logger.progress=false",
           f"hydra.run.dir={run_dir}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return run_dir


@pytest.fixture(scope="module", params=[pytest.param("joblib", marks=pytest.mark.slow),
                                        pytest.param("submitit_local", marks=pytest.mark.slow)])
def swept(request, tmp_path_factory, overrides, alone):
    """(launcher, sweep dir, exit code, output) of the three-job sweep (wandb offline on with
    joblib)."""
    sweep_dir = tmp_path_factory.mktemp(request.param)
    more = ("logger=wandb",) if request.param == "joblib" else ()
    code, out = launch("smoke_sweep", request.param, overrides, sweep_dir, *more)
    return request.param, sweep_dir, code, out


def test_a_failed_run_does_not_stop_the_others_and_is_named(swept):
    launcher, sweep_dir, code, out = swept
    dirs = run_dirs(sweep_dir)
    assert [status(dirs[k]) for k in ("good", "other", "bad")] == ["finished", "finished", "failed"]
    assert code == run_sweep.EXIT_FAILED, out
    # progress: which run of how many, how it ended, counts so far, the time left
    assert "/3 finished in" in out and "/3 failed in" in out and " left" in out, out
    summary = out[out.index("sweep smoke_sweep: 3 runs"):]
    assert "2 finished, 0 skipped (finished before), 1 failed" in summary
    assert f"failed: {dirs['bad']}: 1 consecutive bad updates" in summary, summary
    assert str(dirs["good"]) not in summary
    if launcher == "submitit_local":  # its output went to a file: the summary says which
        assert "(log: " in summary and ".submitit" in summary


def test_a_launched_run_matches_the_run_alone_bit_for_bit(swept, alone):
    _, sweep_dir, _, _ = swept
    good = run_dirs(sweep_dir)["good"]
    assert metrics(good) == metrics(alone)
    ours, theirs = token_rows(good), token_rows(alone)
    assert ours.keys() == theirs.keys() and ours
    for name, rows in ours.items():
        assert rows == theirs[name], name


def test_a_rerun_skips_finished_runs_and_resumes_unfinished_ones(swept, overrides):
    launcher, sweep_dir, _, _ = swept
    dirs = run_dirs(sweep_dir)
    before = metrics(dirs["other"])
    # One good run is marked unfinished (as a killed one is): it resumes from its last
    # checkpoint; the other is skipped; the failed one runs again (and fails again).
    state = json.loads((dirs["other"] / "status.json").read_text())
    (dirs["other"] / "status.json").write_text(json.dumps({**state, "status": "running"}))
    code, out = launch("smoke_sweep", launcher, overrides, sweep_dir)
    assert code == run_sweep.EXIT_FAILED
    assert status(dirs["other"]) == "finished" and metrics(dirs["other"]) == before
    assert json.loads((dirs["other"] / "meta.json").read_text())["resumed_at_step"] == 2
    assert "(1 finished before, skipped)" in out and "skipped (finished before):" in out
    assert "1 finished, 1 skipped (finished before), 1 failed" in out, out


def test_wandb_groups_the_runs_by_sweep_and_cell(swept):
    launcher, sweep_dir, _, _ = swept
    if launcher != "joblib":
        pytest.skip("wandb is checked on the joblib sweep")
    good = run_dirs(sweep_dir)["good"]
    wandb_file = sorted(good.glob("wandb/offline-run-*/run-*.wandb"))[0]
    run = next(r.run for r in wandb_records(wandb_file) if r.WhichOneof("record_type") == "run")
    cell = f"smoke/ppo/{good.parent.name}"  # seeds of one cell share a group
    assert run.run_group == cell
    assert run.job_type == "smoke_sweep"
    assert {"sweep:smoke_sweep", "smoke", "ppo", "seed0"} <= set(run.tags)


@pytest.mark.parametrize("launcher", ["joblib", "submitit_local"])
def test_every_job_is_checked_before_any_starts_with_a_launcher(tmp_path, overrides, capsys,
                                                                launcher):
    kind = run_sweep.choose_launcher(launcher, 2, None, overrides)
    # checkpoint.keep changes no number: both jobs would write one run dir
    shared = sweep_command(overrides, tmp_path, "checkpoint.keep=2,3", *kind.overrides)
    bad = sweep_command(overrides, tmp_path, "train.staleness_mode=nope", *kind.overrides)
    for cmd, key in ((shared, "hydra.sweep.subdir"), (bad, "train.staleness_mode")):
        with pytest.raises(SystemExit) as exit_:
            run_sweep.check_all([cmd])
        assert exit_.value.code == 2
        assert capsys.readouterr().err.startswith(f"config error: {key}")
    assert not any(tmp_path.iterdir())  # nothing was made


def test_the_launcher_is_chosen_in_one_place(capsys):
    joblib = run_sweep.choose_launcher("joblib", 3, 1, [])
    assert joblib.overrides == ["hydra/launcher=local_joblib", "hydra.launcher.n_jobs=3",
                                "train.threads=1", "logger.progress=false"]
    assert joblib.workers == 3
    local = run_sweep.choose_launcher("submitit_local", 2, None, [])
    assert "hydra.sweeper.max_batch_size=2" in local.overrides and local.workers == 2
    slurm = run_sweep.choose_launcher("submitit_slurm", None, None, [])
    assert slurm.overrides == ["hydra/launcher=slurm"] and slurm.workers == 64
    passed = run_sweep.choose_launcher(None, 2, None, ["hydra/launcher=joblib"])
    assert passed.kind == "joblib" and passed.overrides[0] == "hydra.launcher.n_jobs=2"
    assert run_sweep.choose_launcher(None, None, None, []).kind == "basic"
    assert config_error(capsys, lambda: run_sweep.choose_launcher(
        "joblib", None, None, ["hydra/launcher=joblib"])).startswith("choose the launcher in one place")
    assert "needs a parallel launcher" in config_error(
        capsys, lambda: run_sweep.choose_launcher(None, 2, None, []))


def test_slurm_yaml_composes_with_the_run_threads():
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["hydra/launcher=slurm", "train.threads=4",
                                           "hydra.launcher.partition=cpu"],
                      return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.partition, launcher.cpus_per_task, launcher.mem_gb) == ("cpu", 4, 8)
    assert launcher.timeout_min > 0


def wandb_records(path: Path):
    """The records of an offline .wandb file (wandb's LevelDB-style log: a 7-byte file
    header, then 32 KiB blocks of chunks, each with a 7-byte header: crc, length, type)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    block, pos, pending = 32 * 1024, 7, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # block trailer
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # full, last
            record = pb.Record()
            record.ParseFromString(pending + chunk)
            pending = b""
            yield record
        elif kind in (2, 3):  # first, middle
            pending += chunk
        else:
            break


@pytest.mark.slow
def test_the_default_launcher_runs_one_after_another_through_the_same_wrapper(tmp_path, overrides):
    # `python experiments/run_sweep.py NAME` without a launcher: Hydra's basic launcher, one
    # process, the same checks, progress and summary.
    kind = run_sweep.choose_launcher(None, None, None, overrides)
    assert kind.kind == "basic" and kind.workers == 1 and kind.overrides == []
    cmd = [sys.executable, "-m", "src.run", "-m", "seed=0,1", *overrides, "train.steps=1",
           "logger.progress=false", f"hydra.sweep.dir={tmp_path}"]
    run_sweep.check_all([cmd])
    out = io.StringIO()
    assert run_sweep.run_sweep("basic_sweep", [cmd], kind, out=out) == 0
    text = out.getvalue()
    assert "run 1/2 finished in" in text and "run 2/2 finished in" in text, text
    assert "sweep basic_sweep: 2 runs" in text and "2 finished, 0 skipped" in text
    assert len(list(tmp_path.glob("smoke/ppo/*/seed*/status.json"))) == 2


def test_progress_lines_are_those_of_the_order_the_runs_ended(tmp_path, monkeypatch):
    # Three runs that all ended before the sweep first looks: each line still says how many
    # were done when that run ended, and the time left then (1 worker: 10 s a run).
    import io
    import json as json_module

    jobs = [run_sweep.Job(i + 1, [], tmp_path / f"run{i}", False) for i in range(3)]
    events = tmp_path / "events"
    ends = {0: (0.0, 10.0, "finished"), 1: (10.0, 20.0, "finished"), 2: (20.0, 20.5, "failed")}
    events.mkdir()
    for i, (start, end, status) in ends.items():
        key = run_sweep.job_key(jobs[i].run_dir)
        (events / f"{key}.start.json").write_text(json_module.dumps({"time": start}))
        (events / f"{key}.end.json").write_text(json_module.dumps(
            {"time": end, "status": status, "seconds": end - start, "error": "boom"}))
    out = io.StringIO()
    run_sweep.Progress("s", jobs, events, workers=1, out=out).poll()
    lines = out.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "[sweep s] run 1/3 finished in 10 s", "[sweep s] run 2/3 finished in 10 s",
        "[sweep s] run 3/3 failed in 0 s"]
    assert "1/3 done" in lines[0] and "left" in lines[0]  # 1 running, 0 queued: 5 s left
    assert "2/3 done" in lines[1] and "3/3 done" in lines[2] and "left" not in lines[2]
