"""The training loop: rollout -> reward -> advantages -> behaviour pass -> k updates.

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
top_entropy's selection, m2po's mask, ...) is decided once per update before the gradient
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

from src.algorithms import Decision, PolicyLossOutput, group_advantages, update_metrics
from src.algorithms._checks import NonFiniteError
from src.checkpoint import TrainState, save_checkpoint
from src.config import Config, minibatch_count, passes_per_rollout, rollout_prompts
from src.policy import response_logprobs
from src.records import concat_columns, rollout_record, token_columns, update_means
from src.rollout import Rollout, RolloutBackend
from src.tasks.rewards import assign_rewards
from src.telemetry import RunWriter


class NumericFault(RuntimeError):
    """Too many consecutive updates with non-finite log-probs, loss or grad norm."""


@dataclass
class MiniBatch:
    rows: Tensor  # indices into the rollout
    data: Rollout
    logp_behavior: Tensor
    entropy_behavior: Tensor
    advantages: Tensor  # [b] per response
    rewards: Tensor
    decision: Decision | None = None  # taken once per rollout (e.g. top_entropy scope=rollout)
    # Mini-batch 0's behaviour pass, run with grad: (logp, entropy) for update 0 to use, so
    # that its forward is not run twice with the same weights on the same tensors.
    policy_pass: tuple[Tensor, Tensor] | None = None


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
        self.log_tokens = True

    # -- one step -------------------------------------------------------------------
    def _step_seed(self, step: int) -> int:
        # Each step's randomness depends only on (seed, step): resume needs no RNG replay.
        return (self.cfg.seed * 1_000_003 + step * 7_919) % (2**31 - 1)

    def _update_seed(self, step: int, update: int) -> int:
        """The seed of a method's random decision (clip_cov's draw) at one update."""
        return (self._step_seed(step) + 104_729 * (update + 1)) % (2**31 - 1)

    def _minibatches(self, roll: Rollout, advantages: Tensor, rewards: Tensor,
                     step: int) -> list[MiniBatch]:
        k = minibatch_count(self.cfg.train)
        gen = torch.Generator().manual_seed(self._step_seed(step))
        perm = torch.randperm(roll.size, generator=gen).view(k, -1)
        batches = []
        with torch.no_grad():
            for rows in perm:
                rows = rows.sort().values
                data = roll.select(rows)
                logp_b, ent_b, kept = self._behaviour_pass(data, first=not batches)
                batches.append(MiniBatch(rows, data, logp_b, ent_b, advantages[rows], rewards[rows],
                                         policy_pass=kept))
        if self.method.decision_scope == "rollout":
            self._rollout_decision(batches, self._step_seed(step))
        return batches

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

    def _micro_slices(self, size: int) -> list[slice]:
        """Rows of a mini-batch of `size` responses, one slice per forward/backward pass."""
        step = self.cfg.train.micro_batch_size or size
        return [slice(start, min(start + step, size)) for start in range(0, size, step)]

    def _score(self, data: Rollout, *, with_entropy: bool = True) -> tuple[Tensor, Tensor | None]:
        """logp and entropy [b, T] of a mini-batch, one forward per micro-batch."""
        parts = self._micro_slices(data.size)
        if len(parts) == 1:
            return response_logprobs(self.model, data, with_entropy=with_entropy)
        logp = entropy = None
        for rows in parts:
            lp, ent = response_logprobs(self.model, _rows(data, rows), with_entropy=with_entropy)
            if logp is None:
                logp = lp.new_zeros(data.response_ids.shape)
                entropy = lp.new_zeros(data.response_ids.shape) if with_entropy else None
            logp[rows, :lp.shape[1]] = lp
            if with_entropy:
                entropy[rows, :lp.shape[1]] = ent
        return logp, entropy

    def _rollout_decision(self, batches: list[MiniBatch], seed: int) -> None:
        """The method's decision once over the whole rollout, from the behaviour pass: its
        mini-batches stacked in order (padded to the longest), each given its rows."""
        length = max(mb.logp_behavior.shape[1] for mb in batches)

        def stacked(tensors: list[Tensor]) -> Tensor:
            return torch.cat([torch.nn.functional.pad(t, (0, length - t.shape[1])) for t in tensors])

        device = batches[0].logp_behavior.device
        logp = stacked([mb.logp_behavior for mb in batches])
        mask = stacked([mb.data.response_mask.to(device) for mb in batches])
        adv = stacked([mb.advantages.to(device)[:, None].expand_as(mb.logp_behavior) for mb in batches])
        entropy = stacked([mb.entropy_behavior for mb in batches])
        decision = self.method.decide(self.method.decision_inputs(logp, logp, adv, mask, entropy, seed))
        start = 0
        for mb in batches:
            rows, t = mb.logp_behavior.shape
            mb.decision, start = decision.take(slice(start, start + rows), t), start + rows

    def _update(self, mb: MiniBatch, on_policy: bool = False, seed: int = 0
                ) -> tuple[dict, object | None, Tensor | None, Tensor | None]:
        """One optimizer update; returns (record, loss output, logp, entropy).

        `on_policy`: no optimizer step since the behaviour pass (the weights are unchanged);
        `seed`: for a method's random decision.
        """
        self.optimizer.zero_grad(set_to_none=True)
        done = self._backward(mb, on_policy, seed)
        out, logp, entropy = done.out, done.logp, done.entropy
        if done.skip_reason is not None:
            self.optimizer.zero_grad(set_to_none=True)
            return {"skipped": True, "skip_reason": done.skip_reason}, out, logp, entropy
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(),
                                                         self.cfg.train.grad_clip))
        metrics = update_metrics(out, mb.advantages, mb.data.response_mask, logp, entropy)
        record = {**metrics, "loss": float(out.loss.detach()), "grad_norm": grad_norm}
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

    @torch.no_grad()
    def _entropy_after(self, mb: MiniBatch, before: float) -> dict:
        """Mean entropy of the mini-batch's response tokens under the weights the step just
        made, against `before` (the same tokens' mean in the update's own forward)."""
        _, entropy = self._score(mb.data)
        after = float(entropy.cpu()[mb.data.response_mask].double().mean())
        return {"entropy_after": after, "entropy_change": after - before}

    def _backward(self, mb: MiniBatch, on_policy: bool = False, seed: int = 0) -> UpdatePass:
        """Accumulate the gradient of the mini-batch's loss into the parameters' .grad, one
        forward/backward per micro-batch; the result is that of one pass over the whole."""
        method = self.method
        device = mb.logp_behavior.device
        mask, adv = mb.data.response_mask.to(device), mb.advantages.to(device)
        parts = self._micro_slices(mb.data.size)
        if len(parts) == 1:
            if mb.policy_pass is not None:  # the behaviour pass's forward, with its graph
                (logp, entropy), mb.policy_pass = mb.policy_pass, None
            else:
                logp, entropy = response_logprobs(self.model, mb.data)
            try:
                decision = mb.decision or self._decide(mb, logp, entropy, mask, adv, seed)
                out = method.loss(logp, mb.logp_behavior, adv, mask, decision)
            except NonFiniteError as e:
                return UpdatePass(None, None, None, f"non-finite input: {e}")
            if not torch.isfinite(out.loss):
                return UpdatePass(out, logp, entropy, "non-finite loss")
            out.loss.backward()
            return UpdatePass(out, logp, entropy)

        try:
            decision = mb.decision or self._whole_batch_decision(mb, mask, adv, on_policy, seed)
        except NonFiniteError as e:
            return UpdatePass(None, None, None, f"non-finite input: {e}")
        denominator = method.denominator(mask, decision)
        logp_all = torch.zeros(mask.shape, dtype=mb.logp_behavior.dtype, device=device)
        entropy_all = torch.zeros_like(logp_all)
        finite = True
        for rows in parts:
            data = _rows(mb.data, rows)
            if not bool(data.response_mask.any()):
                continue  # no response token: nothing to score, no gradient
            t = data.response_ids.shape[1]
            # After a non-finite loss no gradient is needed, only the numbers for telemetry.
            with torch.set_grad_enabled(finite and torch.is_grad_enabled()):
                logp, entropy = response_logprobs(self.model, data)
                logp_all[rows, :t], entropy_all[rows, :t] = logp.detach(), entropy
                try:
                    out = method.loss(logp, mb.logp_behavior[rows, :t], adv[rows], mask[rows, :t],
                                      decision.take(rows, t), denominator=denominator)
                except NonFiniteError as e:
                    return UpdatePass(None, None, None, f"non-finite input: {e}")
                finite = finite and bool(torch.isfinite(out.loss))
                if finite and out.loss.requires_grad:
                    out.loss.backward()
            del logp, entropy, out  # this micro-batch's graph and logits go here
        with torch.no_grad():  # the whole mini-batch's loss value and token states
            out = method.loss(logp_all, mb.logp_behavior, adv, mask, decision)
        return UpdatePass(out, logp_all, entropy_all, None if finite else "non-finite loss")

    def _decide(self, mb: MiniBatch, logp: Tensor, entropy: Tensor | None, mask: Tensor,
                adv: Tensor, seed: int) -> Decision:
        """The method's decision on the whole mini-batch's current numbers (detached)."""
        if not self.method.decides:
            return Decision()
        return self.method.decide(self.method.decision_inputs(
            logp, mb.logp_behavior, adv, mask, entropy, seed))

    def _whole_batch_decision(self, mb: MiniBatch, mask: Tensor, adv: Tensor, on_policy: bool,
                              seed: int) -> Decision:
        """The decision on the whole mini-batch, taken once before its micro-batches'
        gradient passes and then held fixed across them."""
        if not self.method.decides:
            return Decision()
        if on_policy:
            # The behaviour pass scored these same micro-batches with these same weights:
            # its numbers are the current policy's, bit for bit, so no second pass.
            logp, entropy = mb.logp_behavior, mb.entropy_behavior
        else:
            with torch.no_grad():
                logp, entropy = self._score(mb.data, with_entropy=self.method.needs_entropy)
        return self._decide(mb, logp, entropy, mask, adv, seed)

    def _token_columns(self, step: int, update: int, mb: MiniBatch, out: PolicyLossOutput,
                       logp: Tensor, entropy: Tensor, keep_rows: Tensor) -> dict[str, np.ndarray]:
        return token_columns(
            step=step, update=update, select=mb.data.response_mask & keep_rows[mb.rows][:, None],
            response_ids=mb.rows, group_ids=mb.data.group_ids, token_ids=mb.data.response_ids,
            logp_behavior=mb.logp_behavior, logp_sampler=mb.data.sampler_logp, logp=logp,
            ratio=out.ratio, advantages=mb.advantages, entropy=entropy, clip_state=out.clip_state,
            in_loss=out.in_loss, c_low=out.c_low, c_high=out.c_high, rewards=mb.rewards,
            lengths=mb.data.lengths())

    def train_step(self, state: TrainState) -> dict:
        cfg, step = self.cfg, state.step
        t_step = time.perf_counter()
        n_prompts = rollout_prompts(cfg.train)
        problems = [self.task.problem(state.task_position + i) for i in range(n_prompts)]
        self.backend.sync_weights(self.model)
        t0 = time.perf_counter()
        roll = self.backend.generate([self.format_prompt(p.prompt) for p in problems],
                                     num_samples=cfg.train.group_size,
                                     max_new_tokens=cfg.rollout.max_new_tokens,
                                     temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
                                     seed=self._step_seed(step))
        time_rollout = time.perf_counter() - t0
        scores = torch.tensor([self.task.score(problems[g], text)
                               for g, text in zip(roll.group_ids.tolist(), roll.texts, strict=True)])
        rewards = assign_rewards(cfg.task.reward, scores, seed=cfg.seed, step=step, p=cfg.task.reward_p)
        adv = group_advantages(rewards, cfg.train.group_size, scale_by_std=cfg.train.advantage_std_norm)
        t0 = time.perf_counter()
        batches = self._minibatches(roll, adv.advantages, rewards, step)
        time_behavior = time.perf_counter() - t0
        keep_rows = self._token_sample(roll.size, step)

        updates, token_parts, time_update, time_telemetry, applied = [], [], 0.0, 0.0, 0
        self.model.train()
        for epoch in range(passes_per_rollout(cfg.train)):
            for j, mb in enumerate(batches):
                t0 = time.perf_counter()
                update_index = epoch * len(batches) + j
                record, out, logp, entropy = self._update(
                    mb, on_policy=applied == 0, seed=self._update_seed(step, update_index))
                dt = time.perf_counter() - t0
                time_update += dt
                record.update(step=step, update=update_index, global_update=state.global_update,
                              policy_lag=applied, time_update_s=dt)
                state.global_update += 1
                if record["skipped"]:
                    self._bad_update(state, record)
                else:
                    applied += 1
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
        state.task_position += n_prompts
        record = self._step_record(step, roll, rewards, scores, adv, batches, updates)
        record.update(time_rollout_s=time_rollout, time_behavior_s=time_behavior,
                      time_update_s=time_update, time_telemetry_s=time_telemetry,
                      time_step_s=time.perf_counter() - t_step)
        self.writer.log_step(record)
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

    def _step_record(self, step, roll, rewards, scores, adv, batches, updates) -> dict:
        ent = torch.cat([mb.entropy_behavior.cpu()[mb.data.response_mask] for mb in batches])
        gap = torch.cat([(mb.data.sampler_logp - mb.logp_behavior.cpu())[mb.data.response_mask].abs()
                         for mb in batches])
        record = rollout_record(step, rewards, scores >= 1.0,  # the verifier's, whatever the reward
                                roll.lengths(), adv.advantages,
                                degenerate_groups=adv.degenerate_groups, num_groups=adv.num_groups,
                                entropy_mean=float(ent.mean()), sampler_logp_gap=float(gap.mean()))
        record.update(update_means(updates))
        return record

    # -- the loop -------------------------------------------------------------------
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
                                self.scheduler, cfg.checkpoint.keep)
            self.writer.set_status("running")
            bar.set_postfix(self._postfix(record), refresh=False)
            bar.update(1)
        bar.close()
        return state

    def _postfix(self, record: dict) -> dict:
        post = {"reward": f"{record['reward_mean']:.2f}", "H": f"{record['entropy_mean']:.3f}"}
        if record.get("c_low") is not None and record.get("c_high") is not None:
            post.update(c_low=f"{record['c_low']:.2f}", c_high=f"{record['c_high']:.2f}")
        return post


def _rows(data: Rollout, rows: slice) -> Rollout:
    """A micro-batch: rows of a mini-batch, trimmed to their own longest prompt and response."""
    return data.select(torch.arange(rows.start, rows.stop))
