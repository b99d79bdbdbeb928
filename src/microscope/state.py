"""The trunk's state before a branch, and its exact restoration after it.

A branch updates the trunk's own model and optimizer in place (no copy of a 135M model per
arm), so what it changes is put back bit for bit: the weights, their gradients (none), the
optimizer's moments and step counts, the learning-rate schedule, and the random number
generators (python, numpy, torch). The methods hold no state between updates (their
decisions are taken anew each update), and the branch neither asks the off-policy source
for data nor writes to the mini-batch (src/microscope/arms.py `Arm.batch` copies it).
"""

from __future__ import annotations

import copy
import hashlib

import torch

from src.checkpoint import rng_state, set_rng_state


class Snapshot:
    def __init__(self, model: torch.nn.Module, optimizer, scheduler):
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.weights = [p.detach().clone() for p in model.parameters()]
        self.optimizer_state = copy.deepcopy(optimizer.state_dict())
        self.scheduler_state = copy.deepcopy(scheduler.state_dict())
        self.rng = copy.deepcopy(rng_state())

    @torch.no_grad()
    def restore(self) -> None:
        for p, saved in zip(self.model.parameters(), self.weights, strict=True):
            p.copy_(saved)
            p.grad = None
        # load_state_dict keeps what it is given: give it a copy, so the next restore has its own
        self.optimizer.load_state_dict(copy.deepcopy(self.optimizer_state))
        self.scheduler.load_state_dict(copy.deepcopy(self.scheduler_state))
        set_rng_state(copy.deepcopy(self.rng))


def state_digest(model: torch.nn.Module, optimizer, scheduler) -> str:
    """sha256 over the weights, the optimizer's state tensors and settings, the schedule and
    the RNG states: equal digests, equal states (for the restore's tests)."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    opt = optimizer.state_dict()
    for index in sorted(opt["state"]):
        for key, value in sorted(opt["state"][index].items()):
            h.update(f"{index}.{key}".encode())
            h.update(value.cpu().contiguous().numpy().tobytes() if torch.is_tensor(value)
                     else repr(value).encode())
    h.update(repr(opt["param_groups"]).encode())
    h.update(repr(sorted(scheduler.state_dict().items(), key=lambda kv: kv[0])).encode())
    rng = rng_state()
    h.update(repr(rng["python"]).encode())
    h.update(repr([a.tobytes() if hasattr(a, "tobytes") else a for a in rng["numpy"]]).encode())
    h.update(rng["torch"].numpy().tobytes())
    return h.hexdigest()
