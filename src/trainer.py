"""The training loop: the source's data -> its mini-batches -> k updates -> the records.

Read top to bottom: `run` (steps, evals, checkpoints), `train_step` (one step), `_updates`
(its updates), `_step_record`. Each job the loop calls has its own module:

- the data: the off-policy source (`offpolicy.source`, src/schedule/sources/) generates
  through `src.generation.Generation` (rollout, reward, advantages) and returns what the
  step trains on; the trainer never asks which source it is;
- the mini-batches (src/minibatches.py): the training set split as the generation split it
  (src/schedule/split.py `minibatch_rows`), each with its behaviour log-probs, the log-probs
  its ratio is taken against, the mismatch correction and a once-per-rollout decision;
- one update (src/update.py): forward, decide, loss, backward, skip on a non-finite
  number, norm clip, step, record;
- token scoring (src/policy.py `Scorer`) and the seeds (src/seeds.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from src.algorithms import PolicyLossOutput
from src.checkpoint import TrainState, save_checkpoint
from src.config import Config
from src.corrections import build_correction
from src.eval_schedule import eval_steps
from src.generation import Generation
from src.minibatches import MiniBatch, StepBatches, build_minibatches
from src.policy import Scorer
from src.records import (
    concat_columns,
    rollout_record,
    step_readings,
    step_without_data,
    token_columns,
    update_means,
)
from src.rollout import RolloutBackend
from src.schedule import (
    StoredRollout,
    TrainingSet,
    build_source,
    minibatch_rows,
    passes_per_rollout,
)
from src.seeds import step_seed, update_seed
from src.telemetry import RunWriter
from src.update import NO_LOSS_TOKENS, Update


class NumericFault(RuntimeError):
    """Too many consecutive updates with non-finite log-probs, loss or grad norm."""


class Trainer:
    def __init__(self, cfg: Config, model, tokenizer, task, backend: RolloutBackend,
                 optimizer, scheduler, writer: RunWriter, checkpoint_dir: Path,
                 evaluate: Callable[[int], dict] | None = None,
                 format_prompt: Callable[[str], str] = lambda p: p):
        self.cfg, self.model, self.tokenizer, self.task = cfg, model, tokenizer, task
        self.backend, self.optimizer, self.scheduler = backend, optimizer, scheduler
        self.writer, self.checkpoint_dir = writer, checkpoint_dir
        self.evaluate, self.format_prompt = evaluate, format_prompt
        self.method = cfg.method.build(norm_length=cfg.rollout.max_new_tokens)
        self.correction = build_correction(cfg.correction)  # the mismatch correction (validated)
        self.source = build_source(cfg.offpolicy)
        # Every scoring pass (behaviour, old log-probs, the loss) scores the distribution the
        # rollout sampled from: logits / rollout.temperature (src/policy.py).
        self.scorer = Scorer(model, cfg.rollout.temperature, cfg.train.micro_batch_size,
                             cfg.train.compile, cfg.train.shared_prefix, cfg.train.pack)
        self.update = Update(
            self.method, self.scorer, optimizer, scheduler, self.correction, cfg.train.grad_clip,
            cfg.offpolicy.weight_cap, cfg.logger.entropy_change)
        self.log_tokens = True
        self.eval_at = set(eval_steps(cfg.eval, cfg.train.steps))  # src/eval_schedule.py
        # Called before each update with its mini-batch; must leave every state as it found
        # it (src/microscope/ branches there and restores).
        self.before_update: Callable[..., None] | None = None
        self.before_step: Callable[[TrainState], None] | None = None  # the same, before a step
        anchor = cfg.offpolicy.anchor
        if anchor != "coupled" and self.source.on_policy:
            print(f"[offpolicy] anchor={anchor}: every step trains on data its own start "
                  "weights generated, so the proximal policy is the behaviour policy and this "
                  "run equals anchor=coupled", flush=True)

    def schedule_state(self) -> dict:
        """What a checkpoint carries for the source (the data it holds, with stored log-probs)."""
        return self.source.state_dict()

    def load_schedule_state(self, state: dict | None) -> None:
        if state:
            self.source.load_state_dict(state)

    # -- the loop ----------------------------------------------------------------------

    def run(self, state: TrainState, progress: bool = True) -> TrainState:
        from tqdm.auto import tqdm

        cfg = self.cfg
        if state.step == 0 and self.evaluate is not None:
            self.writer.log_eval(self.evaluate(0))
        bar = tqdm(total=cfg.train.steps, initial=state.step, disable=not progress,
                   desc=f"{cfg.method.name} {cfg.experiment.name}", dynamic_ncols=True)
        while state.step < cfg.train.steps:
            if self.before_step is not None:  # e.g. the microscope's short-horizon branches
                self.before_step(state)
            t0 = time.perf_counter()
            record = self.train_step(state)
            state.step += 1
            done = state.step
            if self.evaluate is not None and done in self.eval_at:
                self.writer.log_eval(self.evaluate(done))
            state.wall_time_s += time.perf_counter() - t0
            if done % cfg.checkpoint.every == 0 or done == cfg.train.steps:
                save_checkpoint(self.checkpoint_dir, state, self.model, self.optimizer,
                                self.scheduler, cfg.checkpoint.keep, schedule=self.schedule_state())
            self.writer.set_status("running")
            bar.set_postfix(self._postfix(record), refresh=False)
            bar.update(1)
        bar.close()
        return state

    def _postfix(self, record: dict) -> dict:
        if record.get("reward_mean") is None:  # a step without training data
            return self.source.telemetry(record["step"], [])
        post = {"reward": f"{record['reward_mean']:.2f}", "H": f"{record['entropy_mean']:.3f}"}
        if record.get("c_low") is not None and record.get("c_high") is not None:
            post.update(c_low=f"{record['c_low']:.2f}", c_high=f"{record['c_high']:.2f}")
        return post

    # -- one step: the source's data, its mini-batches, k updates, the records ---------

    def train_step(self, state: TrainState) -> dict:
        """The source's data for this step, its mini-batches (with the behaviour pass of the
        rows the current weights generated), `train.epochs` passes of one update per
        mini-batch, then the step record."""
        step = state.step
        t_step = time.perf_counter()
        gen = Generation(self.cfg, self.task, self.tokenizer, self.backend, self.scorer,
                         self.format_prompt, state)  # rollouts by the current weights
        data = self.source.next(gen)  # the step's training data, from wherever it comes
        time_behavior = gen.time_behavior
        time_rollout = time.perf_counter() - t_step - time_behavior
        if data is None:  # the source has nothing to train on yet: the step only generated
            record = {**step_without_data(step), **self.source.telemetry(step, []),
                      "time_rollout_s": time_rollout, "time_step_s": time.perf_counter() - t_step}
            self.writer.log_step(record)
            return record
        t0 = time.perf_counter()
        training = TrainingSet(data.trained)
        batches = self._minibatches(training, state)
        time_behavior += time.perf_counter() - t0
        updates, times = self._updates(batches, training, state)
        record = self._step_record(step, data.generated, training, batches.batches, updates)
        record.update(time_rollout_s=time_rollout, time_behavior_s=time_behavior, **times,
                      time_step_s=time.perf_counter() - t_step)
        self.writer.log_step(record)
        return record

    def _minibatches(self, training: TrainingSet, state: TrainState) -> StepBatches:
        """The step's mini-batches (src/minibatches.py): the split of its seed, the behaviour
        and proximal passes, the correction and a once-per-rollout decision; the behaviour
        passes of rows the current weights generated go back to the rollouts that own them."""
        seed = step_seed(self.cfg.seed, state.step)
        parts = minibatch_rows(self.cfg.train, training.data, seed, rollouts=len(training.rollouts))
        built = build_minibatches(training, parts, self.scorer, state.policy_version,
                                  self.cfg.offpolicy, self.correction, self.method, seed)
        for mb in built.batches:
            if mb.logp_start is not None:
                training.store_behaviour(mb.rows, mb.logp_start.cpu(), mb.entropy_start.cpu())
        return built

    def _updates(self, built: StepBatches, training: TrainingSet, state: TrainState
                 ) -> tuple[list[dict], dict[str, float]]:
        """`train.epochs` passes of one update per mini-batch, each logged with its token rows;
        returns the update records and the time spent updating and logging."""
        step, batches = state.step, built.batches
        # Update 0 backpropagates through mini-batch 0's behaviour forward, taken here so that
        # it goes with update 0; not where a hook may move the weights in place before it (the
        # microscope restores them, but the kept graph would see the change): then the update
        # runs its own forward, the same numbers.
        kept_forward = built.kept_forward and built.kept_forward.take()
        if self.before_update is not None:
            kept_forward = None
        keep_rows = self._token_sample(training.size, step)
        updates, token_parts, time_update, time_telemetry, applied = [], [], 0.0, 0.0, 0
        self.model.train()
        for epoch in range(passes_per_rollout(self.cfg.train)):
            for j, mb in enumerate(batches):
                update, version = epoch * len(batches) + j, state.policy_version
                on_policy = applied == 0 and mb.logp_start is not None
                seed = update_seed(self.cfg.seed, step, update)
                if self.before_update is not None:  # e.g. the microscope's branches
                    self.before_update(mb, version=version, on_policy=on_policy, seed=seed,
                                       step=step, update=update)
                t0 = time.perf_counter()
                record, out, logp, entropy = self.update(mb, version, on_policy=on_policy,
                                                         seed=seed, kept_forward=kept_forward)
                kept_forward = None  # update 0's alone
                dt = time.perf_counter() - t0
                time_update += dt
                record.update(step=step, update=update, global_update=state.global_update,
                              time_update_s=dt)
                if record.get("policy_lag") is None:  # a skipped update: no drift readings
                    record["policy_lag"] = float(mb.lag(version).double().mean())
                state.global_update += 1
                applied += self._tally(state, record)
                t0 = time.perf_counter()
                self.writer.log_update(record)
                if self.log_tokens and out is not None and bool(keep_rows.any()):
                    token_parts.append(self._token_columns(step, update, mb, out, logp, entropy,
                                                           keep_rows, version))
                time_telemetry += time.perf_counter() - t0
                updates.append(record)
        t0 = time.perf_counter()
        if token_parts:
            self.writer.write_tokens(step, concat_columns(token_parts))
        time_telemetry += time.perf_counter() - t0
        return updates, {"time_update_s": time_update, "time_telemetry_s": time_telemetry}

    def _tally(self, state: TrainState, record: dict) -> int:
        """1 for an update that stepped the optimizer (the policy version moves on), else 0;
        a numeric fault is counted toward `train.max_bad_updates`."""
        if record["skipped"] and record["skip_reason"] != NO_LOSS_TOKENS:
            self._bad_update(state, record)
            return 0
        if record["skipped"]:
            return 0  # nothing to train on: neither a step nor a numeric fault
        state.policy_version += 1
        state.consecutive_bad_updates = 0
        return 1

    def _step_record(self, step: int, generated: StoredRollout, training: TrainingSet,
                     batches: list[MiniBatch], updates: list[dict]) -> dict:
        """The rollout generated this step (the current policy's samples: reward, accuracy,
        lengths, its entropy), the ages of the rollouts trained on, the updates' means."""
        readings = generated.readings
        if not readings:  # trained this step: its behaviour pass ran in the mini-batches
            mine = [(mb, (training.owner[mb.rows] == 0)) for mb in batches]
            readings = step_readings(
                [mb.entropy_behavior.cpu()[rows][mb.data.response_mask[rows]] for mb, rows in mine],
                [(mb.data.sampler_logp[rows] - mb.logp_behavior.cpu()[rows])[mb.data.response_mask[rows]].abs()
                 for mb, rows in mine])
            generated.store_readings(readings)
        record = rollout_record(step, generated.rewards, generated.scores >= 1.0,  # the verifier's
                                generated.data.lengths(), generated.advantages,
                                degenerate_groups=generated.degenerate_groups,
                                num_groups=generated.num_groups, **readings)
        record.update(update_means(updates))
        record.update(self.source.telemetry(step, training.rollouts))
        return record

    def _token_sample(self, size: int, step: int) -> Tensor:
        """The responses whose token rows the run dir keeps (`logger.token_fraction`)."""
        frac = self.cfg.logger.token_fraction
        if frac >= 1.0:
            return torch.ones(size, dtype=torch.bool)
        gen = torch.Generator().manual_seed(step_seed(self.cfg.seed, step) + 1)
        return torch.rand(size, generator=gen) < frac

    def _bad_update(self, state: TrainState, record: dict) -> None:
        state.consecutive_bad_updates += 1
        state.skipped_updates += 1
        print(f"[numeric] step {record['step']} update {record['update']}: skipped "
              f"({record['skip_reason']}); {state.consecutive_bad_updates} in a row, "
              f"{state.skipped_updates} in total", flush=True)
        if state.consecutive_bad_updates >= self.cfg.train.max_bad_updates:
            raise NumericFault(
                f"{state.consecutive_bad_updates} consecutive bad updates (last at step "
                f"{record['step']} update {record['update']}: {record['skip_reason']}); "
                f"stopping. The last good checkpoint is kept in {self.checkpoint_dir}")

    def _token_columns(self, step: int, update: int, mb: MiniBatch, out: PolicyLossOutput,
                       logp: Tensor, entropy: Tensor, keep_rows: Tensor,
                       version: int) -> dict[str, np.ndarray]:
        return token_columns(
            step=step, update=update, select=mb.data.response_mask & keep_rows[mb.rows][:, None],
            response_ids=mb.rows, group_ids=mb.data.group_ids, token_ids=mb.data.response_ids,
            logp_behavior=mb.logp_behavior, logp_sampler=mb.data.sampler_logp, logp=logp,
            ratio=out.ratio, advantages=mb.advantages, entropy=entropy, clip_state=out.clip_state,
            in_loss=out.in_loss, c_low=out.c_low, c_high=out.c_high, rewards=mb.rewards,
            lengths=mb.data.lengths(), policy_version=mb.version, lag=mb.lag(version),
            is_weight=mb.is_weight, rs_keep=mb.rs_keep)
