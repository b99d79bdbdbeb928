"""Short-horizon branches: each arm trained for `horizon` rollouts from the same trunk state,
with common random numbers, then evaluated; the state restored and the trunk goes on.

Common random numbers come from the run's seeds being functions of where the run is, never
of earlier draws (src/seeds.py): from the same state every arm gets the same problems, the
same sampler seed stream, the same mini-batch splits and the same eval seed. Their responses
differ only because their policies do.

Every arm runs the trunk's own loop (`Trainer.train_step`) with its method swapped in, writing
nothing to the trunk's run dir; then its accuracy is measured on `horizon_eval_problems`
held-out problems (greedy, and `horizon_eval_samples` samples each at the eval temperature),
with log p(correct) and the entropy on the study's probes. The trunk's state is put back bit for
bit: weights, optimizer, schedule, RNG (src/microscope/state.py), the train state and the
off-policy source (a copy of it runs each arm).
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

from src.gradient_step import GradientStep
from src.microscope.arms import Arm
from src.microscope.probes import read
from src.microscope.state import Snapshot
from src.microscope.table import BranchTable


class _Silent:
    """A run writer that keeps nothing: an arm's steps are not the trunk's records."""

    def log_step(self, record):
        pass

    def log_update(self, record):
        pass

    def write_tokens(self, step, columns):
        pass


class Horizons:
    def __init__(self, settings, arms: list[Arm], path: Path, label: dict):
        self.settings, self.arms, self.path, self.label = settings, arms, Path(path), label
        self.parts = self.probes = self.table = self.evaluate = None

    def attach(self, parts, state, probes) -> None:
        from src.build import build_evaluator

        self.parts, self.probes = parts, probes
        s, cfg = self.settings, parts.cfg
        eval_cfg = dataclasses.replace(
            cfg, task=dataclasses.replace(cfg.task, eval_problems=s.horizon_eval_problems),
            eval=dataclasses.replace(cfg.eval, greedy=True, sampled=True,
                                     samples=s.horizon_eval_samples),
            logger=dataclasses.replace(cfg.logger, progress=False))
        self.evaluate = build_evaluator(eval_cfg, parts.model, parts.tokenizer, parts.task,
                                        parts.format_prompt, backend=parts.backend)
        self.table = BranchTable(self.path, resume_at=state.step, record=False)
        parts.trainer.before_step = self.branch

    def branch(self, state) -> None:
        if state.step not in self.settings.horizon_states:
            return
        trainer = self.parts.trainer
        snapshot = Snapshot(trainer.model, trainer.optimizer, trainer.scheduler)
        kept = (trainer.method, trainer.gradient_step, trainer.writer, trainer.source,
                trainer.log_tokens, trainer.before_update)
        rows = [self._row("start", state.step, 0)]
        try:
            for arm in self.arms:
                self._run_arm(arm, state)
                rows.append(self._row(arm.spec, state.step, self.settings.horizon))
                snapshot.restore()
        finally:
            (trainer.method, trainer.gradient_step, trainer.writer, trainer.source,
             trainer.log_tokens, trainer.before_update) = kept
            snapshot.restore()
        self.table.add(rows)

    def _run_arm(self, arm: Arm, state) -> None:
        trainer, cfg = self.parts.trainer, self.parts.cfg
        source = trainer.source
        trainer.source = copy.deepcopy(source)
        trainer.method, trainer.writer, trainer.log_tokens = arm.method, _Silent(), False
        trainer.before_update = None
        grad_clip = cfg.train.grad_clip if arm.grad_clip is None else arm.grad_clip
        trainer.gradient_step = GradientStep(arm.method, trainer.scorer, trainer.optimizer,
                                             trainer.scheduler, trainer.correction, grad_clip,
                                             cfg.offpolicy.weight_cap)
        own = dataclasses.replace(state)
        for _ in range(self.settings.horizon):
            if own.step >= cfg.train.steps:
                break
            trainer.train_step(own)
            own.step += 1

    def _row(self, arm: str, start: int, horizon: int) -> dict:
        model = self.parts.trainer.model
        accuracy = self.evaluate(start + horizon)
        reading = read(model, self.probes, self.parts.cfg.rollout.temperature)
        return {**self.label, "rollout": start, "arm": arm, "horizon": horizon,
                "sampled_accuracy": accuracy["sampled_accuracy"],
                "greedy_accuracy": accuracy["greedy_accuracy"],
                "eval_problems": accuracy["n_problems"],
                "logp_correct": reading.logp_correct, "entropy": reading.entropy}
