"""The TRL plug under `accelerate launch --cpu --num_processes 2` (data parallel, gloo).

The slowest tier (two processes, about a minute on 2 cores), but CI runs it: only rank 0
writes the run dir, the run dir is complete, and its token rows cover both ranks' responses.
The launch takes a free port, and a failed launch prints each rank's whole log.

Its one failure on record (rank 1 died of SIGABRT while the other test worker was busy)
has no known cause: what was tried to reproduce it, none of which aborted, is in
docs/integrations.md ("The accelerate test's one failure"). A repeat prints each rank's whole
log and Python stack, so it names its cause.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytest.importorskip("trl")
pytest.importorskip("accelerate")
pytestmark = [pytest.mark.trl, pytest.mark.slow]


def _free_port() -> int:
    """A port no process listens on now. A fixed port fails the launch whenever another
    process holds it (a second checkout's test run on the same machine: torch's rendezvous
    store then stops with EADDRINUSE)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch_report(proc: subprocess.CompletedProcess, rank_logs) -> str:
    """Everything the launch printed, whole: the launcher's stdout and stderr, then each
    rank's own stdout and stderr (torchrun's per-rank files), so a rank that died says why."""
    parts = [f"exit code {proc.returncode}", "--- launcher stdout ---", proc.stdout,
             "--- launcher stderr ---", proc.stderr]
    for log in sorted(p for p in rank_logs.rglob("*") if p.is_file()):
        parts += [f"--- {log.relative_to(rank_logs)} ---", log.read_text(errors="replace")]
    return "\n".join(parts)


def test_two_cpu_processes_write_one_complete_run_dir(tmp_path):
    import pyarrow.parquet as pq

    from src.integrations.trl_launch import requested_cpu_processes

    assert requested_cpu_processes(["accelerate", "launch", "--cpu", "--num_processes", "2"]) == 2
    assert requested_cpu_processes(["accelerate", "launch", "--num_processes=3"]) == 3
    run_dir = tmp_path / "runs" / "trl_2x" / "bapo" / "seed0"
    accelerate = shutil.which("accelerate") or os.path.join(os.path.dirname(sys.executable), "accelerate")
    cmd = [accelerate, "launch", "--cpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "--num_cpu_threads_per_process", "1",
           "--main_process_port", str(_free_port()),
           "-m", "src.integrations.trl_launch", "--config", "conf/integrations/trl_grpo_tiny_cpu.yaml",
           f"run_dir={run_dir}", f"cache_dir={tmp_path / 'cache'}", f"trl.output_dir={tmp_path / 'out'}",
           "experiment=trl_2x", "trl.max_steps=4", "trl.per_device_train_batch_size=4",
           "trl.num_generations=4", "trl.max_completion_length=16", "trl.disable_tqdm=true",
           "trl.logging_steps=100", "model.architecture.hidden_size=64", "model.sft.steps=150",
           "model.sft.eval_problems=16", "task.eval_problems=8", "eval.every=1"]
    rank_logs = tmp_path / "rank_logs"
    # torchrun (started by src/integrations/trl_launch.py) reads its options from PET_*: each
    # rank's stdout and stderr go whole to files under rank_logs, and a rank killed by a
    # signal writes its Python stacks there first (PYTHONFAULTHANDLER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "PET_LOG_DIR": str(rank_logs), "PET_REDIRECTS": "3", "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, _launch_report(proc, rank_logs)
    # the logs a failure would print exist: one stderr file per rank
    assert sorted(log.parent.name for log in rank_logs.rglob("stderr.log")) == ["0", "1"]

    for name in ("config.yaml", "meta.json", "status.json", "metrics.jsonl"):
        assert (run_dir / name).is_file(), name
    assert json.loads((run_dir / "status.json").read_text())["status"] == "finished"
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["num_processes"] == 2 and meta["end_time"]
    import yaml

    engine = yaml.safe_load((run_dir / "config.yaml").read_text())["engine"]
    assert (engine["num_processes"], engine["distributed_type"]) == (2, "MULTI_CPU")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    updates = [r for r in records if r["kind"] == "update"]
    # one record per optimizer step, written once (by rank 0), each combining both ranks
    assert [(u["step"], u["update"]) for u in updates] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(u["micro_batches"] == 2 for u in updates)
    assert [r["step"] for r in records if r["kind"] == "step"] == [0, 1]
    assert [r["step"] for r in records if r["kind"] == "eval"] == [0, 1, 2]
    tokens = pq.read_table(run_dir / "tokens").to_pandas()
    # rollout of 4 per rank x 2 ranks x 2 mini-batches = 16 responses: both ranks' halves
    assert set(tokens["response_id"]) == set(range(16))
    assert len(tokens) == sum(u["tokens_total"] for u in updates)  # every token of every rank
    per_update = tokens.groupby(["step", "update"])["response_id"].nunique()
    assert (per_update == 8).all()
