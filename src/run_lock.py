"""An OS lock on a run dir for the whole run, so two processes never write one dir.

`fcntl.flock` on `<run dir>/.lock`: the kernel drops it when its holder exits however it
exits (SIGKILL included), so a killed run leaves no stale lock and the same command resumes
it. The holder writes its pid and host into the file, so a second process can name it.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

LOCK_NAME = ".lock"


class RunDirBusy(RuntimeError):
    """Another process holds the run dir's lock; the message names it."""


def _holder(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except OSError:
        text = ""
    return text or "another process (it has not written its pid yet)"


def lock_run_dir(run_dir: Path):
    """Take the run dir's lock; returns the open lock file (keep it open for the run).

    Raises RunDirBusy naming the holder (pid and host) when another process has it.
    """
    path = Path(run_dir) / LOCK_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 - held open for the whole run
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise RunDirBusy(f"hydra.run.dir: {run_dir} is in use by {_holder(path)}; wait for it "
                         "to end or give this run another dir") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on host {socket.gethostname()}\n")
    handle.flush()
    return handle


def check_unlocked(run_dir: Path) -> None:
    """Raise RunDirBusy if another process holds `run_dir`'s lock (takes nothing)."""
    path = Path(run_dir) / LOCK_NAME
    if not path.exists():
        return
    with open(path) as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirBusy(f"hydra.run.dir: {run_dir} is in use by {_holder(path)}; wait for "
                             "it to end or give this run another dir") from None
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


class RunDirLock:
    """The run dir's lock for one run; `renew()` after the dir was moved aside."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.handle = lock_run_dir(self.run_dir)

    def renew(self) -> None:
        """Lock the dir now at `run_dir` if the locked file went with a moved dir."""
        if not (self.run_dir / LOCK_NAME).exists():
            self.handle.close()
            self.handle = lock_run_dir(self.run_dir)

    def close(self) -> None:
        self.handle.close()
