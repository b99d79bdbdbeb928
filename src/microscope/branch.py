"""The microscope on a trunk: at each chosen state, one update per arm from the same state and
mini-batch, measured, then the state restored and the trunk's own update left to run.

`Microscope.attach` is the run's `observe` hook (src/run.py `execute`): it loads or draws the
probes and hangs `branch` on the trainer's `before_update`. The trunk itself is the ordinary
run; the one thing it does differently is that at a branched update 0 it runs its own forward
again instead of backpropagating through the behaviour pass's kept graph, which a branch's
in-place step would invalidate (the numbers are the same, bit for bit: tests/test_microscope.py).
"""

from __future__ import annotations

import time
from pathlib import Path

from src.algorithms.surrogate import carries_gradient
from src.gradient_step import GradientStep
from src.microscope.arms import CLASSES, Arm, token_classes
from src.microscope.horizon import Horizons
from src.microscope.probes import Probes, Reading, build_probes, change_se, kl, read
from src.microscope.state import Snapshot
from src.microscope.table import BranchTable

PROBES_FILE = "probes.pt"
TABLE_FILE = "branches.parquet"
HORIZONS_FILE = "horizons.parquet"


class Microscope:
    def __init__(self, settings, arms: list[Arm], study_dir: Path, label: dict,
                 horizon_arms: list[Arm] = ()):
        self.settings, self.arms, self.study_dir = settings, arms, Path(study_dir)
        self.label = label  # trunk's experiment, method, seed: a column each
        self.parts = self.probes = self.table = None
        self.horizons = (Horizons(settings, list(horizon_arms), self.study_dir / HORIZONS_FILE, label)
                         if horizon_arms else None)

    # -- attaching to the trunk ---------------------------------------------------------
    def attach(self, parts, state) -> None:
        """The run's `observe` hook: probes (drawn at step 0, read back on a resume), the table
        (the rows of states a resumed trunk runs again are a record it checks), the hook."""
        self.parts = parts
        path = self.study_dir / PROBES_FILE
        if path.exists():
            self.probes = Probes.load(path)
        elif state.step == 0:
            self.probes = build_probes(parts, self.settings)
            self.probes.save(path)
        else:
            raise RuntimeError(f"{path} is missing but the trunk resumes at step {state.step}: the "
                               "probe is drawn by the step-0 weights; remove the study dir and "
                               "start it again")
        self.table = BranchTable(self.study_dir / TABLE_FILE, resume_at=state.step)
        if self.arms:
            parts.trainer.before_update = self.branch
        if self.horizons is not None:
            self.horizons.attach(parts, state, self.probes)

    def chosen(self, step: int, update: int) -> bool:
        s = self.settings
        return (step >= s.first and (s.last is None or step <= s.last)
                and (step - s.first) % s.every == 0
                and (s.updates is None or update in s.updates))

    # -- one state ------------------------------------------------------------------------
    def branch(self, mb, *, version: int, on_policy: bool, seed: int, step: int, update: int
               ) -> None:
        if not self.chosen(step, update):
            return
        trainer = self.parts.trainer
        # The kept behaviour forward (update 0) holds the weights in its graph; a branch's
        # in-place step would invalidate it, so the trunk runs that forward again.
        mb.policy_pass = None
        snapshot = Snapshot(trainer.model, trainer.optimizer, trainer.scheduler)
        temperature = self.parts.cfg.rollout.temperature
        t0 = time.perf_counter()
        before = read(trainer.model, self.probes, temperature)
        clock = {"time_read_before_s": time.perf_counter() - t0}
        classes = token_classes(mb)
        if (recorded := self.table.recorded_at(step, update)) is not None:
            check_recorded_state(recorded[0], before, classes, self.table.path)
            snapshot.restore()  # as after the arms: the trunk goes on from the same state
            self.table.confirm(step, update)
            print(f"[microscope] rollout {step} update {update}: the recorded state, read "
                  "equal; its rows kept", flush=True)
            return
        rows = []
        subset_state = step % self.settings.subset_every == 0
        for arm in self.arms:
            if arm.spec in self.settings.subset_arms and not subset_state:
                continue
            t0 = time.perf_counter()
            record, out = self._update(arm, mb, classes, version, on_policy, seed)
            t1 = time.perf_counter()
            after = read(trainer.model, self.probes, temperature)
            clock.update(time_update_s=t1 - t0, time_read_s=time.perf_counter() - t1)
            rows.append({**self._row(arm, step, update, record, out, classes, before, after),
                         **clock})
            snapshot.restore()
        self.table.add(rows)

    def _update(self, arm: Arm, mb, classes, version, on_policy, seed):
        trainer, cfg = self.parts.trainer, self.parts.cfg
        grad_clip = cfg.train.grad_clip if arm.grad_clip is None else arm.grad_clip
        step = GradientStep(arm.method, trainer.scorer, trainer.optimizer, trainer.scheduler,
                            trainer.correction, grad_clip, cfg.offpolicy.weight_cap)
        record, out, _, _ = step(arm.batch(mb, classes), version, on_policy=on_policy, seed=seed)
        return record, out

    def _row(self, arm: Arm, step: int, update: int, record: dict, out, classes,
             before: Reading, after: Reading) -> dict:
        row = {**self.label, "rollout": step, "update": update, "arm": arm.spec,
               "arm_kind": arm.kind, "objective": arm.method.name,
               "token_class": arm.token_class, "norm_clip": arm.grad_clip is None,
               "skipped": bool(record.get("skipped")), "skip_reason": record.get("skip_reason"),
               "c_low": None if out is None else out.c_low,
               "c_high": None if out is None else out.c_high,
               "entropy_before": before.entropy, "d_entropy": after.entropy - before.entropy,
               "logp_correct_before": before.logp_correct,
               "d_logp_correct": after.logp_correct - before.logp_correct,
               "kl": kl(before, after),
               # the probes' own sampling error of the two changes (per response, per problem;
               # the entropy's per response, so it is a rough guide for the per-token mean)
               "d_entropy_se": change_se(before.per_response_entropy, after.per_response_entropy),
               "d_logp_correct_se": change_se(before.per_problem_logp, after.per_problem_logp),
               "positive_share": record.get("contrib_grad_pos_share"),
               "clip_fraction": record.get("clip_frac"),
               "grad_norm": record.get("grad_norm"), "grad_clipped": record.get("grad_clipped"),
               "loss": record.get("loss"), "policy_lag": record.get("policy_lag"),
               "tokens_in_loss": record.get("tokens_in_loss"),
               "rho_before": record.get("rho_before"), "bapo_steps": record.get("bapo_steps"),
               "bapo_reached": record.get("bapo_reached")}
        row.update(_class_clip_fractions(out, classes))
        return row


def check_recorded_state(row: dict, before: Reading, classes, table_path: Path) -> None:
    """The state the trunk reached equals the one a recorded row was made at: the same probe
    reading (the weights) and the same token classes (the mini-batch), bit for bit."""
    seen = {"entropy_before": before.entropy, "logp_correct_before": before.logp_correct,
            **{f"n_{name}": int(classes[name].sum()) for name in CLASSES}}
    differs = {key: (row[key], value) for key, value in seen.items() if row[key] != value}
    if differs:
        shown = "; ".join(f"{key} recorded {old!r}, now {new!r}" for key, (old, new) in differs.items())
        raise RuntimeError(
            f"rollout {row['rollout']} update {row['update']}: the trunk ran again to another "
            f"state than the one {table_path} recorded ({shown}). Another CPU family or another "
            "commit gives other last bits (docs/numerics.md); the recorded rows are kept "
            "untouched. Resume on the machine family and commit that made them, or move the "
            "table aside to make every row again on this one")


def _class_clip_fractions(out, classes) -> dict:
    """Per token class of the mini-batch: its loss tokens (`n_<class>`) and the share of those
    the rule kept in its loss whose gradient it removed (`clip_frac_<class>`; None where it
    kept none of them)."""
    row = {}
    for name in CLASSES:
        cls = classes[name]
        row[f"n_{name}"] = int(cls.sum())
        row[f"clip_frac_{name}"] = None
        if out is None:
            continue
        t = out.clip_state.shape[1]
        in_loss = out.in_loss.cpu() & cls[:, :t]
        clipped = in_loss & ~carries_gradient(out.clip_state.cpu())
        n = int(in_loss.sum())
        if n:
            row[f"clip_frac_{name}"] = int(clipped.sum()) / n
    return row
