"""One process per run dir: a second one exits 2 naming the holder; a killed holder frees it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from src.lifecycle import lock_run_dir
from src.run import execute
from tests.conftest import REPO, compose

HOLD = ("import sys\nfrom src.lifecycle import lock_run_dir\nlock = lock_run_dir(sys.argv[1])\n"
        "print('locked', flush=True)\nsys.stdin.read()\n")


@pytest.fixture
def holder(tmp_path):
    """A process that holds tmp_path/run's lock until its stdin closes (or it is killed)."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], cwd=REPO, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == "locked"  # it holds the lock from here on
    yield run_dir, proc
    if proc.poll() is None:
        proc.stdin.close()
        proc.wait(timeout=60)


@pytest.mark.slow
def test_a_second_process_exits_2_naming_the_holder(holder, tmp_path):
    run_dir, proc = holder
    cache = tmp_path / "cache"
    second = subprocess.run([sys.executable, "-m", "src.run", "experiment=smoke",
                             f"hydra.run.dir={run_dir}", f"cache_dir={cache}"], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert second.returncode == 2, second.stderr[-2000:]
    err = second.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert f"pid {proc.pid} on host {socket.gethostname()}" in err, err
    assert not cache.exists()  # refused before the warm start
    assert sorted(p.name for p in run_dir.iterdir()) == [".lock"]


def test_execute_takes_the_lock_itself(holder, tmp_path, capsys):
    """Two processes that both passed the preflight: the lock taken in execute decides."""
    run_dir, proc = holder
    cache = tmp_path / "cache"
    with pytest.raises(SystemExit) as refused:
        execute(compose(["experiment=smoke", f"cache_dir={cache}"]), run_dir)
    assert refused.value.code == 2
    assert f"pid {proc.pid} on host" in capsys.readouterr().err
    assert not cache.exists()


def test_a_sigkilled_holder_releases_the_lock(holder):
    run_dir, proc = holder
    with pytest.raises(SystemExit):  # held: refused
        execute(compose(["experiment=smoke"]), run_dir)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    lock = lock_run_dir(run_dir)  # no stale lock left behind
    try:
        assert (run_dir / ".lock").read_text().strip() == f"pid {os.getpid()} on host {socket.gethostname()}"
    finally:
        lock.close()
