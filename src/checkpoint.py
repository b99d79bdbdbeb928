"""Atomic checkpoints: everything a resumed run needs to continue bit-for-bit."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

_PREFIX = "step_"


@dataclass
class TrainState:
    step: int = 0  # next step to run
    global_update: int = 0
    task_position: int = 0  # index of the next training problem
    consecutive_bad_updates: int = 0
    skipped_updates: int = 0
    wall_time_s: float = 0.0  # summed over the run's segments (resumes)
    policy_version: int = 0  # optimizer steps applied so far (a token's lag is measured in these)


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(directory: Path, state: TrainState, model, optimizer, scheduler,
                    keep: int, schedule: dict | None = None) -> Path:
    """Write `step_XXXXXX.pt` via temp file + rename, then prune to the newest `keep`.

    `schedule`: the data in flight (a delay queue, a replay buffer), with its stored
    behaviour log-probs, so a resumed run trains on exactly what it would have."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"{_PREFIX}{state.step:06d}.pt"
    tmp = directory / f".{final.name}.tmp"
    torch.save({"state": vars(state), "model": model.state_dict(),
                "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "rng": rng_state(), "schedule": schedule or {}}, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, final)
    for old in list_checkpoints(directory)[:-keep]:
        old.unlink()
    return final


def prune_finished(directory: Path, keep_final: bool) -> None:
    """A finished run needs no checkpoint to be skipped, analysed or verified: keep the last
    one (to continue training from it) or, with keep_final=False, none."""
    keep = list_checkpoints(directory)[-1:] if keep_final else []
    for path in list_checkpoints(directory):
        if path not in keep:
            path.unlink()
    if not keep and directory.exists() and not any(directory.iterdir()):
        directory.rmdir()


def list_checkpoints(directory: Path) -> list[Path]:
    if not directory.exists():
        return []
    return sorted(directory.glob(f"{_PREFIX}*.pt"))


def load_latest(directory: Path) -> tuple[dict | None, list[str]]:
    """Newest readable checkpoint, and a note for each unreadable one skipped."""
    notes = []
    for path in reversed(list_checkpoints(directory)):
        try:
            return torch.load(path, map_location="cpu", weights_only=False), notes
        except Exception as e:  # a torn or corrupt file: fall back to the previous one
            notes.append(f"checkpoint {path.name} is unreadable ({type(e).__name__}); skipped")
    return None, notes


def restore(payload: dict, model, optimizer, scheduler) -> TrainState:
    model.load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["optimizer"])
    scheduler.load_state_dict(payload["scheduler"])
    set_rng_state(payload["rng"])
    return TrainState(**payload["state"])
