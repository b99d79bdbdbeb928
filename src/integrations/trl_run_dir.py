"""The TRL plug's run dir: what `ProjectGRPOTrainer` records for `analysis/`.

`TrlRunDir` is the bookkeeping the trainer holds and calls at TRL's hook points; it writes
the project's run dir (config.yaml, meta.json, status.json, metrics.jsonl with
update/step/eval records, tokens/step_XXXXXX.parquet) through `src.telemetry.RunWriter`,
with the records of `src.records`, as the project trainer's are. Only the main process
writes; every rank keeps its own micro-batch records and token rows, gathered at the end
of each update and rollout. With no `run_dir` it keeps the timers and nothing else.

The hook points (all on every rank):

    training_step             -> update_timer()     (update time, minus generation)
    _calculate_rewards        -> rewards_per_func   (all ranks' reward rows)
    _generate_and_score_...   -> start_rollout()    (rollout record, response ids, token draw)
    _compute_loss             -> micro_batch()      (micro-batch record, token rows)
    _get_grad_norm            -> note_grad_norm()
    on_train_begin (callback) -> open(), eval at step 0
    on_step_end (callback)    -> end_update()       (kind: update; end_rollout() after the last)
    train                     -> finish() / close(error)
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from transformers import TrainerCallback
from trl import GRPOTrainer

from src.records import combine_records, concat_columns, rollout_record, token_columns, update_means

VERSIONED = ("torch", "transformers", "trl", "accelerate", "datasets", "vllm", "deepspeed",
             "bapo-repro")


class TrlRunDir:
    """The run dir of one `ProjectGRPOTrainer` (`trainer`, a GRPOTrainer subclass whose
    `method`, `objective`, `staleness`, `epochs`, `updates_per_rollout` and `global_stats`
    are set). `path` None: no run dir, TRL's own logging only."""

    def __init__(self, trainer: GRPOTrainer, path: str | Path | None, *, experiment: str,
                 token_fraction: float, accuracy_threshold: float,
                 eval_fn: Callable[[int], dict] | None, eval_every: int | None,
                 extra_config: Mapping[str, Any] | None):
        if not 0.0 < token_fraction <= 1.0:
            raise ValueError(f"token_fraction must be in (0, 1], got {token_fraction}")
        if eval_fn is not None and (eval_every is None or eval_every < 1):
            raise ValueError("eval_every must be >= 1 when eval_fn is given")
        self.trainer = trainer
        self.path = Path(path) if path is not None else None
        self._experiment = experiment
        self._token_fraction = float(token_fraction)
        self._accuracy_threshold = float(accuracy_threshold)
        self._eval_fn, self._eval_every = eval_fn, eval_every
        self._extra_config = dict(extra_config or {})
        self._writer = None
        self._last_eval_step: int | None = None
        self._reset_rollout(step=-1)
        self._micro: list[dict] = []
        self._update_time = 0.0
        self._gen_time = 0.0
        self._train_step_t0: float | None = None  # start of the running training_step
        self._last_grad_norm: float | None = None
        self.rewards_per_func: Tensor | None = None  # all ranks' rows, in process order

    def callback(self) -> TrainerCallback:
        """The TRL callback that opens the run dir and ends each update."""
        return _RunDirCallback(self)

    # -- timers (every training_step, with or without a run dir) -------------------------
    @contextmanager
    def update_timer(self) -> Iterator[None]:
        """Around one training_step: its time, less the generation it ran, goes to the update."""
        t0, self._gen_time = time.perf_counter(), 0.0
        self._train_step_t0 = t0
        try:
            yield
        finally:
            self._train_step_t0 = None
        self._update_time += time.perf_counter() - t0 - self._gen_time

    def note_grad_norm(self, norm) -> None:
        try:
            self._last_grad_norm = float(norm)
        except (TypeError, ValueError):
            self._last_grad_norm = None

    # -- rollout bookkeeping --------------------------------------------------------------
    def start_rollout(self, out: dict, t0: float) -> None:
        """After TRL generated and scored a rollout (training, with a run dir): response and
        group ids and rewards into `out`, the rollout's record, its token draw."""
        t = self.trainer
        rpf = self.rewards_per_func
        rewards = (rpf * t.reward_weights.to(rpf.device)[None]).nansum(dim=1)
        rewards[torch.isnan(rpf).all(dim=1)] = math.nan
        b = out["completion_ids"].shape[0]
        rank = t.accelerator.process_index
        ids = torch.arange(rank * b, (rank + 1) * b, device=rewards.device)
        out["repro_response_id"] = ids
        out["repro_group_id"] = ids // t.num_generations
        out["repro_reward"] = rewards[ids]
        step = t.state.global_step // t.updates_per_rollout
        self._reset_rollout(step)
        # time_step_s covers the rollout too, as in the project's trainer, and starts with the
        # training_step that generates: update 0's time counts from there (minus generation),
        # so a later start would let rollout + updates exceed the step.
        self._rollout_t0 = t0 if self._train_step_t0 is None else self._train_step_t0
        lengths = t.accelerator.gather(out["completion_mask"].sum(dim=1))
        advantages = t.accelerator.gather(out["advantages"].reshape(b, -1)[:, 0].contiguous())
        gap = self._sampler_gap(out)
        gen = torch.Generator().manual_seed(int(t.args.seed) * 1_000_003 + step)
        self._keep = torch.rand(rewards.numel(), generator=gen) < self._token_fraction
        self._rollout_stats = self._rollout_record(step, rewards.float().cpu(), lengths.float().cpu(),
                                                   advantages.float().cpu(), gap)
        self._gen_time = time.perf_counter() - t0
        self._rollout_stats["time_rollout_s"] = self._gen_time

    def _sampler_gap(self, out: dict) -> float | None:
        sampler, behaviour = out.get("sampling_per_token_logps"), out.get("old_per_token_logps")
        if sampler is None or behaviour is None:
            return None
        m = out["completion_mask"].bool() & torch.isfinite(sampler)
        part = torch.stack([(sampler - behaviour).abs()[m].sum(), m.sum().to(sampler.dtype)])
        total = self.trainer.accelerator.reduce(part, reduction="sum")
        return float(total[0] / total[1]) if float(total[1]) > 0 else None

    def _rollout_record(self, step: int, rewards: Tensor, lengths: Tensor, adv: Tensor,
                        gap: float | None) -> dict:
        grouped = rewards.view(-1, self.trainer.num_generations)
        degenerate = int((grouped == grouped[:, :1]).all(dim=1).sum())
        finite = torch.isfinite(rewards)
        return {**rollout_record(step, rewards[finite], rewards[finite] >= self._accuracy_threshold,
                                 lengths, adv, degenerate_groups=degenerate,
                                 num_groups=grouped.shape[0], entropy_mean=None,
                                 sampler_logp_gap=gap),
                "time_behavior_s": None}

    def _reset_rollout(self, step: int) -> None:
        self._rollout_step = step
        self._rollout_stats: dict = {}
        self._rollout_updates: list[dict] = []
        self._token_parts: list[dict[str, np.ndarray]] = []
        self._keep: Tensor | None = None
        self._rollout_t0 = time.perf_counter()
        self._time_telemetry = 0.0

    def micro_batch(self, record: dict, inputs: dict, mask: Tensor, logps: Tensor, old: Tensor,
                    adv: Tensor, entropy: Tensor, out) -> None:
        """A training micro-batch's metrics record (every rank keeps its own; they combine at
        the update's end) and, unless it was skipped (`out` None), its token rows."""
        if self.path is None:
            return
        record["tokens_total"] = int(mask.sum())
        self._micro.append(record)
        if out is not None:  # every rank keeps its own; rank 0 gathers them per rollout
            self._token_rows(inputs, mask.bool(), logps, old, adv, entropy, out)

    def _token_rows(self, inputs, mask, logps, old, adv, entropy, out) -> None:
        t0 = time.perf_counter()
        t = self.trainer
        ids = inputs["repro_response_id"].cpu()
        keep = self._keep[ids] if self._keep is not None else torch.ones_like(ids, dtype=torch.bool)
        sel = mask.cpu() & keep[:, None]
        if not bool(sel.any()):
            return
        update = (t._step % (t.args.steps_per_generation * t.num_iterations)
                  ) // t.args.gradient_accumulation_steps
        self._token_parts.append(token_columns(
            step=self._rollout_step, update=update, select=sel, response_ids=ids,
            group_ids=inputs["repro_group_id"], token_ids=inputs["completion_ids"],
            logp_behavior=old, logp_sampler=inputs.get("sampling_per_token_logps"), logp=logps,
            ratio=out.ratio, advantages=adv, entropy=entropy, clip_state=out.clip_state,
            in_loss=out.in_loss, c_low=out.c_low, c_high=out.c_high,
            rewards=inputs["repro_reward"], lengths=inputs["completion_mask"].sum(dim=1)))
        self._time_telemetry += time.perf_counter() - t0

    def _gathered_token_parts(self) -> dict[str, np.ndarray] | None:
        """This rollout's token rows of all ranks (on the main process; None elsewhere), in
        (update, response_id, position) order, as the project's trainer writes them."""
        accelerator = self.trainer.accelerator
        local = concat_columns(self._token_parts) if self._token_parts else None
        self._token_parts = []
        if accelerator.num_processes > 1:
            from accelerate.utils import gather_object

            everyone = [p for p in gather_object([local]) if p is not None]
        else:
            everyone = [local] if local is not None else []
        if not accelerator.is_main_process or not everyone:
            return None
        columns = concat_columns(everyone)
        order = np.lexsort((columns["position"], columns["response_id"], columns["update"]))
        return {k: v[order] for k, v in columns.items()}

    # -- update / step boundaries ---------------------------------------------------------
    def end_update(self) -> None:
        """After each optimizer step (every rank): one `kind: update` record."""
        from accelerate.utils import gather_object

        t = self.trainer
        records = gather_object(self._micro) if t.accelerator.num_processes > 1 else self._micro
        self._micro = []
        done = t.state.global_step  # already counts this update
        index = (done - 1) % t.updates_per_rollout
        record = combine_records(records, t.objective.traits)
        gn = self._last_grad_norm
        record.update(step=self._rollout_step, update=index, global_update=done - 1,
                      policy_lag=index, grad_norm=gn if gn is not None and math.isfinite(gn) else None,
                      time_update_s=self._update_time)
        self._last_grad_norm, self._update_time = None, 0.0
        self._rollout_updates.append(record)
        if self._writer is not None:
            self._writer.log_update(record)
        if done % t.updates_per_rollout == 0:
            self.end_rollout()

    def end_rollout(self) -> None:
        """After a rollout's last update (every rank): tokens, `kind: step`, maybe eval."""
        step, updates = self._rollout_step, self._rollout_updates
        if step < 0 or not updates:
            return
        t0 = time.perf_counter()
        parts = self._gathered_token_parts()  # collective: every rank calls it
        if self._writer is not None:
            if parts:
                self._writer.write_tokens(step, parts)
            self._time_telemetry += time.perf_counter() - t0
            record = dict(self._rollout_stats)
            # Update 0 runs the behaviour weights, so its entropies are the behaviour policy's
            # (on the first mini-batch: a 1/k random sample of the rollout's responses).
            record["entropy_mean"] = updates[0].get("entropy_mean")
            record.update(update_means(updates))
            record.update(time_update_s=sum(u["time_update_s"] for u in updates),
                          time_telemetry_s=self._time_telemetry,
                          time_step_s=time.perf_counter() - self._rollout_t0)
            self._writer.log_step(record)
            self._writer.set_status("running")
        self._rollout_updates = []
        if self._eval_fn is not None and (step + 1) % self._eval_every == 0:
            self.evaluate(step + 1)

    def evaluate(self, step: int) -> None:
        if self._last_eval_step == step:
            return
        model = self.trainer.model
        was_training = model.training
        record = self._eval_fn(step)
        model.train(was_training)
        self._last_eval_step = step
        if self._writer is not None:
            self._writer.log_eval({**record, "step": step})

    # -- run dir lifecycle ----------------------------------------------------------------
    def run_config(self) -> dict:
        """config.yaml: the keys analysis reads (docs/run_dir.md) plus the TRL knobs."""
        t = self.trainer
        a = t.args
        rollout_batch = int(a.generation_batch_size)
        max_steps = int(a.max_steps) if a.max_steps and a.max_steps > 0 else None
        knobs = {k: getattr(a, k, None) for k in (
            "per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
            "num_iterations", "generation_batch_size", "num_generations", "max_completion_length",
            "loss_type", "scale_rewards", "use_vllm", "max_steps", "learning_rate", "max_grad_norm")}
        return {
            "method": t.method.config,
            "experiment": {"name": self._experiment, "description": "TRL GRPOTrainer plug"},
            "train": {"staleness": t.staleness, "epochs": t.epochs,
                      "steps": -(-max_steps // t.updates_per_rollout) if max_steps else None,
                      "prompts_per_step": rollout_batch // t.num_generations,
                      "group_size": t.num_generations, "lr": float(a.learning_rate),
                      "grad_clip": float(a.max_grad_norm),
                      "advantage_std_norm": getattr(a, "scale_rewards", "group") == "group"},
            "rollout": {"backend": "vllm" if getattr(a, "use_vllm", False) else "hf",
                        "max_new_tokens": a.max_completion_length,
                        "temperature": a.temperature, "top_p": a.top_p},
            "logger": {"token_fraction": self._token_fraction},
            "seed": int(a.seed),
            "engine": {"name": "trl", "num_processes": t.accelerator.num_processes,
                       "distributed_type": getattr(t.accelerator.distributed_type, "value",
                                                   str(t.accelerator.distributed_type)),
                       "global_stats": t.global_stats,
                       "knobs": json.loads(json.dumps(knobs, default=str))},
            **self._extra_config,
        }

    def open(self) -> None:
        """At train begin: the main process opens (or, on resume, cuts back) the run dir."""
        from src.run_vocab import run_meta
        from src.telemetry import RunWriter

        t = self.trainer
        done_steps = t.state.global_step // t.updates_per_rollout
        if not t.accelerator.is_main_process:
            return
        meta = run_meta(versioned=VERSIONED, device=t.accelerator.device,
                        method=t.method.name, experiment=self._experiment,
                        staleness=t.staleness, seed=int(t.args.seed),
                        resumed_at_step=done_steps or None, engine="trl",
                        num_processes=t.accelerator.num_processes)
        self._meta = meta
        # A fresh start (-1) drops what a crashed earlier run left; a resume keeps the steps
        # its checkpoint covers (TRL regenerates a rollout cut by the checkpoint).
        resumed = t.state.global_step > 0
        self._writer = RunWriter(self.path, self.run_config(), meta,
                                 resume_at_step=done_steps if resumed else -1)
        self._writer.last_step = done_steps - 1 if done_steps else None
        self._writer.set_status("running")

    def begin(self, global_step: int) -> None:
        """TRL's on_train_begin: open the run dir; evaluate step 0 on a fresh start."""
        self.open()
        if self._eval_fn is not None and global_step == 0:
            self.evaluate(0)

    def finish(self) -> None:
        """After TRL's train returned: the partial last rollout, the last eval, close."""
        if self.path is not None:
            if self._rollout_updates:  # max_steps not a multiple of k*e: the partial last step
                self.end_rollout()
            if self._eval_fn is not None:
                self.evaluate(self.trainer.state.global_step // self.trainer.updates_per_rollout)
        self.close(None)

    def close(self, error: BaseException | None) -> None:
        from src.run_vocab import now_iso

        if self._writer is None:
            return
        if error is None:
            self._meta.update(end_time=now_iso())
            self._writer.write_meta(self._meta)
            self._writer.set_status("finished")
        else:
            self._writer.set_status("failed", error=f"{type(error).__name__}: {error}")
        self._writer.close()
        self._writer = None


class _RunDirCallback(TrainerCallback):
    def __init__(self, run_dir: TrlRunDir):
        self.run_dir = run_dir

    def on_train_begin(self, args, state, control, **kwargs):
        self.run_dir.begin(state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        self.run_dir.end_update()
