"""The training loop: the source's data -> behaviour pass -> k updates -> records.

Each step asks the off-policy source (`offpolicy.source`, src/schedule/sources/) for its
training data; the source generates through `src.generation.Generation` (rollout, reward,
advantages) and the trainer never asks which source it is. Read top to bottom: `run`,
`train_step`, its data (`_training_batches`), one update (`_update`, its gradient in
`_backward`), the forwards.

One step of staleness k makes k optimizer updates from one rollout; update j uses data j
optimizer steps stale. `train.staleness_mode` says how the rollout is split: `minibatch`
shuffles the B = prompts x G responses into k mini-batches of B/k; `fixed_update` samples
k x prompts per rollout, so each of the k mini-batches holds B responses like a 1x update;
`epochs` makes k full-batch updates on one rollout of B. The behaviour log-probs are
recomputed by the trainer's own model on exactly the mini-batch tensors the updates use,
so update 0 is on-policy bit for bit (ratio == 1) and sampler drift is only a metric.
Without micro-batching, update 0 backpropagates through mini-batch 0's behaviour forward
itself (run with grad) instead of repeating it.

The method (`cfg.method.build()`, src/algorithms/methods/) is used only through its
interface: its decision over the whole mini-batch, then its loss; the update's metrics
(`src.algorithms.metrics`) and token rows (`src.records`) are computed once from the
output over the whole mini-batch.

Micro-batching (`train.micro_batch_size`): each update's forward/backward runs over
micro-batches of that many responses (the behaviour pass too, on the same micro-batches),
with gradients accumulated so that the result is the whole mini-batch's gradient: every
micro-batch's loss is normalised by the whole mini-batch's denominator
(`Method.denominator`). What a method decides over the whole mini-batch (BAPO's bounds,
top_entropy's selection, m2po's bounds, ...) is decided once per update before the gradient
passes, from a no-grad pass over the micro-batches, and each micro-batch gets its part
(`Decision.take`). At an update with no optimizer step since the behaviour pass that
pass's numbers are the current policy's, so it is reused instead. A method that decides
once per rollout (top_entropy scope=rollout) decides on the behaviour pass of all the
rollout's mini-batches.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from src.algorithms import Decision, PolicyLossOutput, update_metrics
from src.algorithms._checks import NonFiniteError
from src.algorithms.drift import drift_metrics, ratio_histogram
from src.checkpoint import TrainState, save_checkpoint
from src.config import Config
from src.corrections import METRIC_PREFIX, build_correction, offpolicy_metrics
from src.generation import Generation
from src.policy import response_logprobs
from src.records import (
    concat_columns,
    rollout_record,
    step_readings,
    step_without_data,
    token_columns,
    update_means,
)
from src.rollout import Rollout, RolloutBackend
from src.schedule import (
    StoredRollout,
    TrainingSet,
    anchored,
    build_source,
    capped_share,
    minibatch_count,
    needs_proximal,
    passes_per_rollout,
    split_rows,
)
from src.telemetry import RunWriter

# The skip reason of an update with no loss-bearing token: not a numeric fault, no step.
NO_LOSS_TOKENS = "no loss-bearing token (a correction rejected them all)"


class NumericFault(RuntimeError):
    """Too many consecutive updates with non-finite log-probs, loss or grad norm."""


@dataclass
class MiniBatch:
    rows: Tensor  # indices into the step's training set (its rollouts' rows, in order)
    data: Rollout
    logp_behavior: Tensor  # by the weights that generated each token
    entropy_behavior: Tensor
    advantages: Tensor  # [b] per response
    rewards: Tensor
    # [b, T] policy version (optimizer steps applied) that generated each token; None: 0
    version: Tensor | None = None
    loss_keep: Tensor | None = None  # [b, T] False on tokens kept out of the loss (None: all in)
    # The log-probs the ratio is taken against (offpolicy.anchor) and the decoupled
    # objective's behaviour weight (None: 1).
    logp_old: Tensor | None = None
    token_weight: Tensor | None = None
    # The current weights' numbers at the start of the step, where this step scored the
    # mini-batch (None where its behaviour pass was stored earlier and nothing asked).
    logp_start: Tensor | None = None
    entropy_start: Tensor | None = None
    decision: Decision | None = None  # taken once per rollout (e.g. top_entropy scope=rollout)
    # Mini-batch 0's behaviour pass, run with grad: (logp, entropy) for update 0 to use, so
    # that its forward is not run twice with the same weights on the same tensors.
    policy_pass: tuple[Tensor, Tensor] | None = None
    # The mismatch correction's IS weight [b, T] (None: no IS); the loss takes it times
    # token_weight (`loss_weight`).
    is_weight: Tensor | None = None
    rs_keep: Tensor | None = None  # [b, T] False on tokens the correction rejected (None: none)

    def __post_init__(self) -> None:
        if self.logp_old is None:
            self.logp_old = self.logp_behavior
        if self.version is None:
            self.version = torch.zeros(self.data.response_ids.shape, dtype=torch.long)

    @property
    def loss_weight(self) -> Tensor | None:
        """The per-token factor on J_t: the anchor's behaviour weight times the correction's
        IS weight (None: neither)."""
        if self.is_weight is None:
            return self.token_weight
        return self.is_weight if self.token_weight is None else self.token_weight * self.is_weight

    @property
    def loss_mask(self) -> Tensor:
        """The response tokens the loss and its metrics read (a source may keep some out,
        `StoredRollout.loss_keep`); the attention always sees every response token."""
        mask = self.data.response_mask
        return mask if self.loss_keep is None else mask & self.loss_keep


@dataclass
class UpdatePass:
    """What an update's forward/backward passes leave: the whole mini-batch's loss output
    (loss value, metrics, ratios, clip states), its logp and entropy [b, T], and the reason
    to skip the optimizer step (None: take it)."""

    out: PolicyLossOutput | None
    logp: Tensor | None
    entropy: Tensor | None
    skip_reason: str | None = None


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
        # Every scoring pass (behaviour, old log-probs, the loss) scores the distribution the
        # rollout sampled from: logits / rollout.temperature (src/policy.py).
        self.temperature = cfg.rollout.temperature
        self.correction = build_correction(cfg.correction)  # the mismatch correction (validated)
        self.source = build_source(cfg.offpolicy)
        self.log_tokens = True
        self._version = 0  # optimizer steps applied before the current update
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
            t0 = time.perf_counter()
            record = self.train_step(state)
            state.step += 1
            done = state.step
            if self.evaluate is not None and (done % cfg.eval.every == 0 or done == cfg.train.steps):
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
        rows the current weights generated), `train.epochs` passes of one `_update` per
        mini-batch, then the step record."""
        cfg, step = self.cfg, state.step
        t_step = time.perf_counter()
        gen = self._generation(state)
        data = self.source.next(gen)  # the step's training data, from wherever it comes
        time_behavior = gen.time_behavior
        time_rollout = time.perf_counter() - t_step - time_behavior
        if data is None:  # the source has nothing to train on yet: the step only generated
            record = {**step_without_data(step), **self.source.telemetry(step, []),
                      "time_rollout_s": time_rollout, "time_step_s": time.perf_counter() - t_step}
            self.writer.log_step(record)
            return record
        generated, trained = data.generated, data.trained
        t0 = time.perf_counter()
        training = TrainingSet(trained)
        batches = self._training_batches(training, step, state)
        time_behavior += time.perf_counter() - t0
        keep_rows = self._token_sample(training.size, step)

        updates, token_parts, time_update, time_telemetry, applied = [], [], 0.0, 0.0, 0
        self.model.train()
        for epoch in range(passes_per_rollout(cfg.train)):
            for j, mb in enumerate(batches):
                t0 = time.perf_counter()
                update_index = epoch * len(batches) + j
                self._version = state.policy_version
                on_policy = applied == 0 and mb.logp_start is not None
                record, out, logp, entropy = self._update(
                    mb, on_policy=on_policy, seed=self._update_seed(step, update_index))
                dt = time.perf_counter() - t0
                time_update += dt
                record.update(step=step, update=update_index, global_update=state.global_update,
                              time_update_s=dt)
                if record.get("policy_lag") is None:  # a skipped update: no drift readings
                    record["policy_lag"] = float(self._lag(mb).double().mean())
                state.global_update += 1
                if record["skipped"] and record["skip_reason"] != NO_LOSS_TOKENS:
                    self._bad_update(state, record)
                elif record["skipped"]:
                    pass  # nothing to train on: neither a step nor a numeric fault
                else:
                    applied += 1
                    state.policy_version += 1
                    state.consecutive_bad_updates = 0
                t0 = time.perf_counter()
                self.writer.log_update(record)
                if self.log_tokens and out is not None and bool(keep_rows.any()):
                    token_parts.append(self._token_columns(step, update_index, mb, out, logp,
                                                           entropy, keep_rows))
                time_telemetry += time.perf_counter() - t0
                updates.append(record)
        t0 = time.perf_counter()
        if token_parts:
            self.writer.write_tokens(step, concat_columns(token_parts))
        time_telemetry += time.perf_counter() - t0
        record = self._step_record(step, generated, training, batches, updates)
        record.update(time_rollout_s=time_rollout, time_behavior_s=time_behavior,
                      time_update_s=time_update, time_telemetry_s=time_telemetry,
                      time_step_s=time.perf_counter() - t_step)
        self.writer.log_step(record)
        return record

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
            generated.readings = readings
        record = rollout_record(step, generated.rewards, generated.scores >= 1.0,  # the verifier's
                                generated.data.lengths(), generated.advantages,
                                degenerate_groups=generated.degenerate_groups,
                                num_groups=generated.num_groups, **readings)
        record.update(update_means(updates))
        record.update(self.source.telemetry(step, training.rollouts))
        return record

    def _token_sample(self, size: int, step: int) -> Tensor:
        frac = self.cfg.logger.token_fraction
        if frac >= 1.0:
            return torch.ones(size, dtype=torch.bool)
        gen = torch.Generator().manual_seed(self._step_seed(step) + 1)
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
                       logp: Tensor, entropy: Tensor, keep_rows: Tensor) -> dict[str, np.ndarray]:
        return token_columns(
            step=step, update=update, select=mb.data.response_mask & keep_rows[mb.rows][:, None],
            response_ids=mb.rows, group_ids=mb.data.group_ids, token_ids=mb.data.response_ids,
            logp_behavior=mb.logp_behavior, logp_sampler=mb.data.sampler_logp, logp=logp,
            ratio=out.ratio, advantages=mb.advantages, entropy=entropy, clip_state=out.clip_state,
            in_loss=out.in_loss, c_low=out.c_low, c_high=out.c_high, rewards=mb.rewards,
            lengths=mb.data.lengths(), policy_version=mb.version, lag=self._lag(mb),
            is_weight=mb.is_weight, rs_keep=mb.rs_keep)

    def _lag(self, mb: MiniBatch) -> Tensor:
        """[b, T] lag in optimizer updates of each token at the current update."""
        return self._version - mb.version

    # -- the step's data: generation and mini-batches with their behaviour log-probs ---

    def _generation(self, state: TrainState) -> Generation:
        """What the source may ask for at this step: rollouts by the current weights."""
        return Generation(self.cfg, self.task, self.tokenizer, self.backend, self.model,
                          self.format_prompt, self._score, self._step_seed, self._split_groups,
                          state)

    def _step_seed(self, step: int) -> int:
        # Each step's randomness depends only on (seed, step): a resume needs no earlier draws.
        return (self.cfg.seed * 1_000_003 + step * 7_919) % (2**31 - 1)

    def _update_seed(self, step: int, update: int) -> int:
        """The seed of a method's random decision (clip_cov's draw) at one update."""
        return (self._step_seed(step) + 104_729 * (update + 1)) % (2**31 - 1)

    def _training_batches(self, training: TrainingSet, step: int, state: TrainState
                          ) -> list[MiniBatch]:
        """The step's mini-batches over its training set, each with the log-probs of the
        weights that generated it and those its ratio is taken against.

        Rows generated by the current weights (a fresh rollout) get their behaviour pass
        here, on the mini-batch tensors; under recompute and decoupled every mini-batch
        holding older data is scored by the current weights too (the proximal policy).
        """
        cfg = self.cfg
        parts = minibatch_count(cfg.train) * len(training.rollouts)
        stale = bool(((training.version < state.policy_version) & training.data.response_mask).any())
        proximal = needs_proximal(cfg.offpolicy.anchor) and stale
        batches: list[MiniBatch] = []
        with torch.no_grad():
            for rows in split_rows(training.size, parts, self._step_seed(step),
                                   self._split_groups(training.data)):
                data = training.data.select(rows)
                t = data.response_ids.shape[1]
                pending = training.pending[rows]
                logp_b = training.logp_behavior[rows, :t]
                ent_b = training.entropy_behavior[rows, :t]
                logp_now = ent_now = kept = None
                if proximal or bool(pending.any()):
                    logp_now, ent_now, kept = self._behaviour_pass(data, first=not batches)
                    pend = pending[:, None].to(logp_now.device)
                    logp_b = torch.where(pend, logp_now, logp_b.to(logp_now.device))
                    ent_b = torch.where(pend, ent_now, ent_b.to(ent_now.device))
                    training.store_behaviour(rows, logp_now.cpu(), ent_now.cpu())
                else:
                    device = next(self.model.parameters()).device
                    logp_b, ent_b = logp_b.to(device), ent_b.to(device)
                logp_old, weight = anchored(cfg.offpolicy.anchor, logp_b,
                                            logp_now if proximal else None,
                                            data.response_mask.to(logp_b.device),
                                            cfg.offpolicy.weight_cap, cfg.offpolicy.weight_rule)
                batches.append(MiniBatch(rows, data, logp_b, ent_b, training.advantages[rows],
                                         training.rewards[rows], training.version[rows, :t],
                                         loss_keep=training.loss_keep[rows, :t],
                                         logp_old=logp_old, token_weight=weight,
                                         logp_start=logp_now, entropy_start=ent_now,
                                         policy_pass=kept))
        if self.correction.active:
            self._correct(batches)
        if self.method.decision_scope == "rollout":
            self._rollout_decision(batches, self._step_seed(step))
        return batches

    def _correct(self, batches: list[MiniBatch]) -> None:
        """The mismatch correction over the step's whole training set, as verl takes it on the
        whole batch before the mini-batch split (its batch normalisation is the whole
        batch's): the IS weight joins each mini-batch's token weight, rejected tokens leave
        its loss mask; under bypass_mode the ratio is taken against the sampler's log-probs."""
        device = batches[0].logp_behavior.device
        stacked = _stack([mb.logp_behavior for mb in batches])
        sampler = _stack([mb.data.sampler_logp.to(device, stacked.dtype) for mb in batches])
        mask = _stack([mb.data.response_mask.to(device) for mb in batches])
        done = self.correction.apply(stacked, sampler, mask)
        start = 0
        for mb in batches:
            rows, t = mb.logp_behavior.shape
            part = slice(start, start + rows)
            start += rows
            if self.correction.bypass_mode:
                mb.logp_old = mb.data.sampler_logp.to(device, stacked.dtype)
            if self.correction.rejection:
                mb.rs_keep = done.keep[part, :t].cpu()
                mb.loss_keep = mb.rs_keep if mb.loss_keep is None else mb.loss_keep & mb.rs_keep
            if done.weight is not None:
                mb.is_weight = done.weight[part, :t]

    def _mismatch_record(self, mb: MiniBatch) -> dict:
        """The gap between the sampler's and the trainer's behaviour log-probs on this
        update's response tokens (verl's off-policy metrics), and the correction's IS and
        rejection statistics on them, as `rollout_corr_*` keys."""
        device = mb.logp_behavior.device
        mask = mb.data.response_mask.to(device)
        if not bool(mask.any()):
            return {}
        sampler = mb.data.sampler_logp.to(device, mb.logp_behavior.dtype)
        metrics = offpolicy_metrics(mb.logp_behavior, sampler, mask)
        if self.correction.rollout_is or self.correction.rejection:
            metrics.update(self.correction.apply(mb.logp_behavior, sampler, mask).metrics)
        return {f"{METRIC_PREFIX}{k}": v for k, v in metrics.items()}

    def _split_groups(self, data: Rollout) -> Tensor | None:
        """Each row's group id when mini-batches take whole groups; None: responses."""
        return data.group_ids if self.cfg.train.minibatch_split == "groups" else None

    def _behaviour_pass(self, data: Rollout, first: bool
                        ) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor] | None]:
        """(logp_b, entropy_b, the forward kept for update 0) of a mini-batch.

        Update 0 runs the behaviour weights on mini-batch 0's tensors, so with one pass per
        update its forward is this one: it runs with grad and is kept, and logp_b is the
        same numbers detached. Micro-batched updates keep no graph between their passes.
        """
        if not (first and len(self._micro_slices(data.size)) == 1):
            return *self._score(data), None
        with torch.enable_grad():
            logp, entropy = self._score(data)
        return logp.detach(), entropy, (logp, entropy)

    def _rollout_decision(self, batches: list[MiniBatch], seed: int) -> None:
        """The method's decision once over the whole rollout, from the behaviour pass: its
        mini-batches stacked in order (padded to the longest), each given its rows."""
        length = max(mb.logp_behavior.shape[1] for mb in batches)

        def stacked(tensors: list[Tensor]) -> Tensor:
            return torch.cat([torch.nn.functional.pad(t, (0, length - t.shape[1])) for t in tensors])

        device = batches[0].logp_behavior.device
        logp = stacked([mb.logp_old for mb in batches])
        mask = stacked([mb.loss_mask.to(device) for mb in batches])
        adv = stacked([mb.advantages.to(device)[:, None].expand_as(mb.logp_behavior) for mb in batches])
        entropy = stacked([mb.entropy_behavior for mb in batches])
        decision = self.method.decide(self.method.decision_inputs(logp, logp, adv, mask, entropy, seed))
        start = 0
        for mb in batches:
            rows, t = mb.logp_behavior.shape
            mb.decision, start = decision.take(slice(start, start + rows), t), start + rows

    # -- one update --------------------------------------------------------------------

    def _update(self, mb: MiniBatch, on_policy: bool = False, seed: int = 0
                ) -> tuple[dict, object | None, Tensor | None, Tensor | None]:
        """One optimizer update on one mini-batch, top to bottom as in CleanRL: the gradient
        of the method's loss, a skip on a non-finite number, the norm clip, the step; then
        the update's metrics. Returns (record, loss output, logp, entropy).

        `on_policy`: no optimizer step since the behaviour pass (the weights are unchanged);
        `seed`: for a method's random decision.
        """
        if not bool(mb.loss_mask.any()):  # e.g. the correction rejected every token: no loss
            return {"skipped": True, "skip_reason": NO_LOSS_TOKENS, **self._mismatch_record(mb)}, \
                None, None, None
        self.optimizer.zero_grad(set_to_none=True)
        done = self._backward(mb, on_policy, seed)  # forward, decision, loss, backward
        out, logp, entropy = done.out, done.logp, done.entropy
        if done.skip_reason is not None:
            self.optimizer.zero_grad(set_to_none=True)
            return {"skipped": True, "skip_reason": done.skip_reason}, out, logp, entropy
        # clip_grad_norm_ returns the norm before clipping
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(),
                                                         self.cfg.train.grad_clip))
        record = self._update_record(mb, out, logp, entropy, grad_norm)
        if not math.isfinite(grad_norm):
            self.optimizer.zero_grad(set_to_none=True)
            record.update(skipped=True, skip_reason="non-finite grad norm", grad_norm=None)
            return record, out, logp, entropy
        self.optimizer.step()
        self.scheduler.step()
        record.update(skipped=False, skip_reason=None)
        if self.cfg.logger.entropy_change and record.get("entropy_mean") is not None:
            record.update(self._entropy_after(mb, record["entropy_mean"]))
        return record, out, logp, entropy

    def _backward(self, mb: MiniBatch, on_policy: bool = False, seed: int = 0) -> UpdatePass:
        """The gradient of the mini-batch's loss, accumulated into the parameters' .grad.

        Top to bottom: the method's decision over the whole mini-batch (BAPO's bounds,
        top_entropy's tokens, ...), then per micro-batch a forward, the loss and its
        backward, then the whole mini-batch's loss output (value, ratios, clip states) for
        the metrics. The micro-batches (`train.micro_batch_size`; one without it) hold the
        activations of one micro-batch at a time and give exactly the whole mini-batch's
        gradient: each loss is divided by the whole mini-batch's denominator, and each
        micro-batch gets its part of the one decision (`Decision.take`). What saves work
        without changing a number:
        - `_reuse_behaviour_forward`: update 0 backpropagates through mini-batch 0's
          behaviour forward instead of running it again (one forward fewer a step);
        - in one pass the method decides on the loss's own forward, and with micro-batches
          `_whole_batch_decision` reuses the behaviour pass's numbers at an update with no
          optimizer step since it (one no-grad pass fewer).
        """
        method, device = self.method, mb.logp_behavior.device
        mask, adv, weight = mb.loss_mask.to(device), mb.advantages.to(device), mb.loss_weight
        micro_batches = self._micro_slices(mb.data.size)
        one_pass = len(micro_batches) == 1
        try:  # a decision taken once per rollout, or now over the whole mini-batch
            decision = mb.decision or (None if one_pass else
                                       self._whole_batch_decision(mb, mask, adv, on_policy, seed))
        except NonFiniteError as e:
            return UpdatePass(None, None, None, f"non-finite input: {e}")
        denominator = None if one_pass else method.denominator(mask, decision)
        logp_all = torch.zeros(mask.shape, dtype=mb.logp_behavior.dtype, device=device)
        entropy_all = torch.zeros_like(logp_all)
        finite = True
        for rows in micro_batches:
            data = mb.data if one_pass else _rows(mb.data, rows)
            if not (one_pass or bool(data.response_mask.any())):
                continue  # no response token: nothing to score, no gradient
            t = data.response_ids.shape[1]
            # A micro-batch whose tokens all left the loss (a correction's rejection) is only
            # scored, for telemetry, as is every one after a non-finite loss.
            carries_loss = one_pass or bool(mask[rows, :t].any())
            with torch.set_grad_enabled(finite and carries_loss and torch.is_grad_enabled()):
                logp, entropy = (self._reuse_behaviour_forward(mb)
                                 or response_logprobs(self.model, data, temperature=self.temperature))
                if not carries_loss:
                    logp_all[rows, :t], entropy_all[rows, :t] = logp, entropy
                    continue
                try:
                    decision = decision or self._decide(mb, logp, entropy, mask, adv, seed)
                    out = method.loss(logp, mb.logp_old[rows, :t], adv[rows], mask[rows, :t],
                                      decision.take(rows, t), denominator=denominator,
                                      token_weight=None if weight is None else weight[rows, :t])
                except NonFiniteError as e:
                    return UpdatePass(None, None, None, f"non-finite input: {e}")
                finite = finite and bool(torch.isfinite(out.loss))
                if finite and out.loss.requires_grad:
                    out.loss.backward()
            if one_pass:  # its output is the whole mini-batch's
                return UpdatePass(out, logp, entropy, None if finite else "non-finite loss")
            logp_all[rows, :t], entropy_all[rows, :t] = logp.detach(), entropy
            del logp, entropy, out  # this micro-batch's graph and logits go here
        with torch.no_grad():  # the whole mini-batch's loss value and token states
            out = method.loss(logp_all, mb.logp_old, adv, mask, decision, token_weight=weight)
        return UpdatePass(out, logp_all, entropy_all, None if finite else "non-finite loss")

    @staticmethod
    def _reuse_behaviour_forward(mb: MiniBatch) -> tuple[Tensor, Tensor] | None:
        """Mini-batch 0's behaviour forward, run with grad for update 0 (`_behaviour_pass`):
        handed over once, then dropped; None otherwise."""
        kept, mb.policy_pass = mb.policy_pass, None
        return kept

    def _whole_batch_decision(self, mb: MiniBatch, mask: Tensor, adv: Tensor, on_policy: bool,
                              seed: int) -> Decision:
        """The decision on the whole mini-batch, taken once before its micro-batches'
        gradient passes and then held fixed across them."""
        if not self.method.decides:
            return Decision()
        if on_policy:
            # This step's pass scored these same micro-batches with these same weights:
            # its numbers are the current policy's, bit for bit, so no second pass.
            scored = mb.logp_start is not None
            logp = mb.logp_start if scored else mb.logp_behavior
            entropy = mb.entropy_start if scored else mb.entropy_behavior
        else:
            with torch.no_grad():
                logp, entropy = self._score(mb.data, with_entropy=self.method.needs_entropy)
        return self._decide(mb, logp, entropy, mask, adv, seed)

    def _decide(self, mb: MiniBatch, logp: Tensor, entropy: Tensor | None, mask: Tensor,
                adv: Tensor, seed: int) -> Decision:
        """The method's decision on the whole mini-batch's current numbers (detached)."""
        if not self.method.decides:
            return Decision()
        return self.method.decide(self.method.decision_inputs(
            logp, mb.logp_old, adv, mask, entropy, seed))

    def _update_record(self, mb: MiniBatch, out: PolicyLossOutput, logp: Tensor,
                       entropy: Tensor, grad_norm: float) -> dict:
        """The update's metrics: the method's (clip fractions, ...), the loss and the gradient's
        norm, the ratio histogram, the data's drift from its behaviour policy."""
        mask = mb.loss_mask
        metrics = update_metrics(out, mb.advantages, mask, logp, entropy)
        record = {**metrics, "loss": float(out.loss.detach()), "grad_norm": grad_norm,
                  "grad_clipped": grad_norm > self.cfg.train.grad_clip}
        record.update(ratio_histogram(out.ratio, mb.advantages, mask))
        # the drift of the data (every response token, a masked stale prefix included)
        response_mask = mb.data.response_mask.to(logp.device)
        record.update(drift_metrics(logp, mb.logp_behavior, response_mask,
                                    self._lag(mb).to(logp.device), mb.token_weight))
        # what the behaviour weight's cap did (offpolicy.weight_rule masked or clamped these)
        record["behav_weight_capped_frac"] = (
            None if mb.token_weight is None else
            capped_share(mb.logp_old, mb.logp_behavior, response_mask, self.cfg.offpolicy.weight_cap))
        record.update(self._mismatch_record(mb))
        return record

    @torch.no_grad()
    def _entropy_after(self, mb: MiniBatch, before: float) -> dict:
        """Mean entropy of the mini-batch's response tokens under the weights the step just
        made, against `before` (the same tokens' mean in the update's own forward)."""
        _, entropy = self._score(mb.data)
        after = float(entropy.cpu()[mb.data.response_mask].double().mean())
        return {"entropy_after": after, "entropy_change": after - before}

    # -- forwards, one per micro-batch -------------------------------------------------

    def _micro_slices(self, size: int) -> list[slice]:
        """Rows of a mini-batch of `size` responses, one slice per forward/backward pass."""
        step = self.cfg.train.micro_batch_size or size
        return [slice(start, min(start + step, size)) for start in range(0, size, step)]

    def _score(self, data: Rollout, *, with_entropy: bool = True) -> tuple[Tensor, Tensor | None]:
        """logp and entropy [b, T] of a mini-batch, one forward per micro-batch."""
        parts = self._micro_slices(data.size)
        if len(parts) == 1:
            return response_logprobs(self.model, data, with_entropy=with_entropy,
                                     temperature=self.temperature)
        logp = entropy = None
        for rows in parts:
            lp, ent = response_logprobs(self.model, _rows(data, rows), with_entropy=with_entropy,
                                        temperature=self.temperature)
            if logp is None:
                logp = lp.new_zeros(data.response_ids.shape)
                entropy = lp.new_zeros(data.response_ids.shape) if with_entropy else None
            logp[rows, :lp.shape[1]] = lp
            if with_entropy:
                entropy[rows, :lp.shape[1]] = ent
        return logp, entropy

def _stack(tensors: list[Tensor]) -> Tensor:
    """Mini-batch tensors [b, T_b] stacked in order, right-padded to the longest."""
    length = max(t.shape[1] for t in tensors)
    return torch.cat([torch.nn.functional.pad(t, (0, length - t.shape[1])) for t in tensors])


def _rows(data: Rollout, rows: slice) -> Rollout:
    """A micro-batch: rows of a mini-batch, trimmed to their own longest prompt and response."""
    return data.select(torch.arange(rows.start, rows.stop))
