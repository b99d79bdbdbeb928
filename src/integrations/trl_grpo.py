"""TRL plug: `GRPOTrainer` whose policy loss is the project's objective.

`ProjectGRPOTrainer` keeps everything of TRL's GRPO (generation with HF or vLLM, reward
functions, group advantages, accelerate/DeepSpeed/FSDP, checkpoints, its own logging) and
replaces only `_compute_loss`: the per-token log-probs and entropies of TRL's own forward
pass go into the method's `decide` and `loss` (`src.algorithms.methods`), which the
project's trainer calls too. No objective math lives here.

Staleness is set with TRL's own knobs (see `trl_staleness`):

    k (updates per rollout)  = steps_per_generation / gradient_accumulation_steps
    e (passes, epochs factor) = num_iterations
    rollout batch            = generation_batch_size
                             = per_device_train_batch_size * num_processes * steps_per_generation

so one optimizer step uses one mini-batch of `generation_batch_size / k` responses, and
update j of a rollout is j updates stale, as in the project's `minibatch` mode.

Optional telemetry writes the project's run dir (config.yaml, meta.json, status.json,
metrics.jsonl with update/step/eval records, tokens/step_XXXXXX.parquet), so
`analysis/make_figures.py --runs <dir>` reads TRL runs; the records come from
`src.records`, as the project trainer's do. Launch: see docs/integrations.md, or
`python -m src.integrations.trl_launch --config conf/integrations/trl_grpo.yaml`.

The class, top to bottom:
- `__init__`: check TRL's knobs, resolve the method, build the run dir's `TrlRunDir`
  (src/integrations/trl_run_dir.py: every record, token row, eval and the run dir's
  opening and closing) as `self.run_dir`;
- the loss: `_compute_loss` (TRL's forward) -> `_objective` (the trainer's `policy_step`,
  with `_global_decision` over all ranks under global_stats) -> `_scale` (TRL's
  normalisation), and `_log_trl_metrics` (the method's metrics in TRL's logs);
- TRL's hooks (`training_step`, `_calculate_rewards`, `_generate_and_score_completions`,
  `_get_grad_norm`, `train`), each a call to `self.run_dir` around TRL's own.
"""

from __future__ import annotations

import inspect
import math
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from trl import GRPOConfig, GRPOTrainer

from src.algorithms import Decision
from src.algorithms._checks import NonFiniteError
from src.integrations._common import ResolvedMethod, resolve_method
from src.integrations.trl_run_dir import TrlRunDir
from src.update import non_finite_input, policy_metrics, policy_step

# Inputs TRL forwards to `_get_per_token_logps_and_entropies` (multimodal models); the
# ones the installed TRL accepts are picked by signature.
_FORWARD_KEYS = ("pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask",
                 "spatial_shapes", "num_tiles", "image_sizes", "token_type_ids",
                 "mm_token_type_ids", "image_position_ids")
SUPPORTED_LOSS_TYPES = ("dapo", "bnpo", "grpo", "dr_grpo")
TESTED_TRL = "1.16"  # the plug overrides TRL internals (_compute_loss, ...): newer majors may move them


def _warn_if_untested_trl() -> None:
    import trl
    major_minor = tuple(int(x) for x in trl.__version__.split(".")[:2] if x.isdigit())
    if major_minor < (1, 16) or major_minor[:1] != (1,):
        warnings.warn(f"the TRL plug was tested with trl {TESTED_TRL}.x; found {trl.__version__}",
                      stacklevel=3)


def trl_staleness(args: GRPOConfig) -> tuple[int, int]:
    """(k, e): optimizer updates per pass over a rollout, and passes (num_iterations).

    Needs `steps_per_generation % gradient_accumulation_steps == 0`, so every optimizer
    step is one whole mini-batch of one rollout.
    """
    gas, spg = int(args.gradient_accumulation_steps), int(args.steps_per_generation)
    if spg % gas:
        raise ValueError(
            f"steps_per_generation ({spg}) must be a multiple of gradient_accumulation_steps "
            f"({gas}): staleness k = steps_per_generation / gradient_accumulation_steps updates "
            "per rollout, each on a whole mini-batch")
    return spg // gas, int(args.num_iterations)


def trl_knobs(staleness: int, *, epochs: int = 1, gradient_accumulation_steps: int = 1) -> dict[str, int]:
    """GRPOConfig fields for the project's staleness k (and epochs factor e)."""
    if staleness < 1 or epochs < 1 or gradient_accumulation_steps < 1:
        raise ValueError("staleness, epochs and gradient_accumulation_steps must be >= 1")
    return {"steps_per_generation": staleness * gradient_accumulation_steps,
            "num_iterations": epochs, "gradient_accumulation_steps": gradient_accumulation_steps}


def check_trl_args(a: GRPOConfig) -> None:
    """GRPOConfig knobs that would change the objective fail here, by name, with the fix."""

    def bad(knob: str, why: str) -> None:
        raise ValueError(f"GRPOConfig.{knob}: {why}")

    if getattr(a, "beta", 0.0) != 0.0:
        bad("beta", "the project's objectives have no KL-to-reference term; set beta=0.0")
    if getattr(a, "importance_sampling_level", "token") != "token":
        bad("importance_sampling_level", "the objectives use token-level ratios; set 'token'")
    if getattr(a, "top_entropy_quantile", 1.0) != 1.0:
        bad("top_entropy_quantile", "use method='top_entropy' (its q) and leave this at 1.0")
    if getattr(a, "off_policy_mask_threshold", None) is not None:
        bad("off_policy_mask_threshold", "sequence masking is not part of the objectives; set None")
    if getattr(a, "delta", None) is not None:
        bad("delta", "two-sided clipping is not part of the objectives; use the method's "
                     "dual_clip_c for the dual clip, or leave delta=None")
    if getattr(a, "entropy_coef", 0.0) != 0.0 or getattr(a, "use_adaptive_entropy", False):
        bad("entropy_coef", "an entropy bonus is not part of the objectives; set 0.0")
    if getattr(a, "use_vllm", False) and getattr(a, "vllm_importance_sampling_correction", False):
        bad("vllm_importance_sampling_correction",
            "set False: the behaviour log-probs are recomputed by the trainer "
            "(old_per_token_logps), as the project does; vLLM's own log-probs are logged "
            "as logp_sampler instead of reweighting the loss")
    if a.loss_type not in SUPPORTED_LOSS_TYPES:
        bad("loss_type", f"{a.loss_type!r} is a different objective; the method's aggregation "
                         f"sets the normalisation (any of {SUPPORTED_LOSS_TYPES} is accepted and ignored)")
    trl_staleness(a)


class ProjectGRPOTrainer(GRPOTrainer):
    """GRPOTrainer with the project's methods (every conf/method label).

    Extra keyword arguments (everything else goes to `GRPOTrainer`):
    - `method`: a conf/method label (`"bapo"`, `"bapo_official"`, `"clip_0.8_1.5"`, ...) or
      a mapping in that format; `method_overrides` is merged on top.
    - `run_dir`: write the project's run dir there (None: TRL's own logging only).
    - `experiment`: `experiment.name` in config.yaml (the label analysis groups by).
    - `token_fraction`: share of responses whose tokens are written (whole responses).
    - `accuracy_threshold`: a response counts as correct when reward >= this.
    - `eval_fn(step) -> {"greedy_accuracy", "sampled_accuracy", "n_problems", ...}`,
      called on every rank (it may run the model) at step 0, every `eval_every` steps and
      at the end; the main process writes `kind: eval` records.
    - `global_stats`: with several processes, take a method's whole-batch decision (BAPO's
      bounds, top_entropy's threshold, ...) over the micro-batches of all ranks (gathered),
      not per rank.

    The loss `aggregation` of the method replaces TRL's `loss_type`: token-mean is TRL's
    `dapo` normalisation (tokens of the whole optimizer step, all ranks),
    seq-mean-token-mean is `grpo`, seq-mean-token-sum-norm is `dr_grpo`.
    """

    def __init__(self, *args, method: str | Mapping[str, Any] = "bapo",
                 method_overrides: Mapping[str, Any] | None = None,
                 run_dir: str | Path | None = None, experiment: str = "trl",
                 token_fraction: float = 1.0, accuracy_threshold: float = 1.0,
                 eval_fn: Callable[[int], dict] | None = None, eval_every: int | None = None,
                 global_stats: bool = True, extra_config: Mapping[str, Any] | None = None,
                 **kwargs):
        trl_args = kwargs.get("args", args[2] if len(args) > 2 else None)
        if trl_args is None:
            raise ValueError("pass args=GRPOConfig(...): the plug reads its staleness knobs")
        check_trl_args(trl_args)  # before TRL builds anything (e.g. a reference model)
        _warn_if_untested_trl()
        super().__init__(*args, **kwargs)
        self.method: ResolvedMethod = resolve_method(
            method, method_overrides, norm_length=self.args.max_completion_length)
        self.objective = self.method.build()
        self.staleness, self.epochs = trl_staleness(self.args)
        self.updates_per_rollout = self.staleness * self.epochs
        self.global_stats = bool(global_stats)
        self.run_dir = TrlRunDir(self, run_dir, experiment=experiment, token_fraction=token_fraction,
                                 accuracy_threshold=accuracy_threshold, eval_fn=eval_fn,
                                 eval_every=eval_every, extra_config=extra_config)
        sig = inspect.signature(self._get_per_token_logps_and_entropies).parameters
        self._forward_keys = tuple(k for k in _FORWARD_KEYS if k in sig)
        if self.objective.decides and self.args.gradient_accumulation_steps > 1:
            warnings.warn(
                f"{self.method.objective} with gradient_accumulation_steps > 1 takes its whole-batch "
                "decision per micro-batch (1/gradient_accumulation_steps of the mini-batch). For "
                "one decision per update use gradient_accumulation_steps=1 and scale "
                "per_device_train_batch_size or the number of processes instead.", stacklevel=2)
        if run_dir is not None:
            self.add_callback(self.run_dir.callback())

    # -- the loss -----------------------------------------------------------------------
    def _compute_loss(self, model, inputs):
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        extra = {k: inputs.get(k) for k in self._forward_keys}
        logps, entropies, aux_loss = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled, **extra)
        old = inputs.get("old_per_token_logps")
        old = logps.detach() if old is None else old
        adv = inputs["advantages"]
        adv = adv[:, None].expand_as(logps) if adv.dim() == 1 else adv.expand_as(logps)
        mode = "train" if self.model.training else "eval"

        out, record = self._objective(logps, old, adv, mask.bool(), entropies)
        # A skipped micro-batch gives a zero loss that keeps the graph (DDP needs it).
        loss = logps.sum() * 0.0 if out is None else self._scale(out.loss, mask, inputs, mode)
        if self.aux_loss_enabled:
            gas = self.current_gradient_accumulation_steps if mode == "train" else 1.0
            loss = loss + self.router_aux_loss_coef * aux_loss / gas
        self._log_trl_metrics(mode, record)
        if mode == "train":
            self.run_dir.micro_batch(record, inputs, mask, logps, old, adv, entropies, out)
        return loss

    def _objective(self, logps: Tensor, old: Tensor, adv: Tensor, mask: Tensor,
                   entropy: Tensor) -> tuple[Any, dict]:
        """(PolicyLossOutput | None, metrics record): the trainer's own `policy_step`
        (src/update.py), with the decision taken over every rank's micro-batch under
        global_stats. None: skip this micro-batch."""
        method = self.objective
        use_global = (self.global_stats and self.accelerator.num_processes > 1 and method.decides)
        seed = (int(self.args.seed) * 1_000_003 + int(self._step)) % (2**31 - 1)
        try:  # collective: every rank takes part, whatever its own mask holds
            decision = self._global_decision(logps, old, adv, mask, entropy, seed) if use_global else None
        except NonFiniteError as e:
            return None, {"skipped": True, "skip_reason": non_finite_input(e)}
        step = policy_step(method, logps, old, adv, mask, entropy, seed=seed, decision=decision)
        if step.skip_reason is not None:
            return None, {"skipped": True, "skip_reason": step.skip_reason}
        return step.out, {**policy_metrics(step.out, adv, mask, logps, entropy),
                          "skipped": False, "skip_reason": None}

    def _global_decision(self, logps, old, adv, mask, entropy, seed: int) -> Decision | None:
        """The method's decision on the detached micro-batches of all ranks; this rank's part.

        Collective: every rank calls it for every micro-batch (TRL keeps ranks in step).
        Needs the same per-rank batch size, which TRL's sampler guarantees in training.
        """
        stacked = torch.stack([logps.detach(), old.detach().to(logps.dtype), adv.to(logps.dtype),
                               mask.to(logps.dtype), entropy.detach().to(logps.dtype)])
        padded = self.accelerator.pad_across_processes(stacked, dim=2, pad_index=0)
        g = self.accelerator.gather(padded[None])  # [world, 5, B, T]
        g = g.transpose(0, 1).reshape(5, -1, g.shape[-1])
        g_logp, g_old, g_adv, g_mask, g_ent = g[0], g[1], g[2], g[3].bool(), g[4]
        if not bool(g_mask.any()):
            return None
        method = self.objective
        whole = method.decide(method.decision_inputs(g_logp, g_old, g_adv, g_mask, g_ent, seed))
        rank, (b, t) = self.accelerator.process_index, logps.shape
        return whole.take(slice(rank * b, (rank + 1) * b), t)

    def _scale(self, loss: Tensor, mask: Tensor, inputs: dict, mode: str) -> Tensor:
        """Turn the micro-batch loss into this micro-step's share of the optimizer step.

        token-mean: the objective's mean over this micro-batch, weighted by the micro-batch's
        share of the response tokens of the whole optimizer step on all ranks (TRL's `dapo`
        normaliser); exactly the token mean over the mini-batch for ppo/clip_higher/bapo.
        seq-mean modes: divided by the accumulation steps (TRL's `grpo` / `dr_grpo`).
        """
        gas = self.current_gradient_accumulation_steps if mode == "train" else 1
        if self.objective.aggregation != "token-mean":
            return loss / gas
        normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
        if mode == "train":
            normalizer = normalizer * gas / self.args.steps_per_generation
        return loss * mask.sum() / normalizer

    def _log_trl_metrics(self, mode: str, record: dict) -> None:
        """The method's view in TRL's own logs (console / wandb / tensorboard)."""
        keys = ("clip_low_frac", "clip_high_frac", "clip_frac", "entropy_mean", "c_low", "c_high",
                "rho", "contrib_grad_pos_share", "token_share_pos", "kl_k3")
        names = ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "entropy",
                 "objective/c_low", "objective/c_high", "objective/rho",
                 "objective/contrib_grad_pos_share", "objective/token_share_pos", "objective/kl_k3")
        vals = [record.get(k) for k in keys]
        local = torch.tensor([math.nan if v is None else float(v) for v in vals],
                             device=self.accelerator.device)
        gathered = self.accelerator.gather(local[None]).reshape(-1, len(keys))
        means = gathered.nanmean(dim=0)
        for name, value in zip(names, means.tolist(), strict=True):
            if math.isfinite(value):
                self._metrics[mode][name].append(value)

    # -- TRL's hooks, handed to the run dir (src/integrations/trl_run_dir.py) --------------
    def training_step(self, model, inputs, num_items_in_batch):
        with self.run_dir.update_timer():
            return super().training_step(model, inputs, num_items_in_batch)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self.run_dir.rewards_per_func = rewards_per_func  # all ranks' rows, in process order
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        t0 = time.perf_counter()
        out = super()._generate_and_score_completions(inputs)
        if self.model.training and self.run_dir.path is not None:
            self.run_dir.start_rollout(out, t0)
        return out

    def _get_grad_norm(self, model, grad_norm=None):
        norm = super()._get_grad_norm(model, grad_norm=grad_norm)
        self.run_dir.note_grad_norm(norm)
        return norm

    def train(self, *args, **kwargs):
        try:
            result = super().train(*args, **kwargs)
        except BaseException as e:
            self.run_dir.close(e)
            raise
        self.run_dir.finish()
        return result
