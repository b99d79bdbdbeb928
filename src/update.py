"""One optimizer update on one mini-batch, read top to bottom (`Update.__call__`):

    forward  ->  decide  ->  loss  ->  backward  ->  skip on a non-finite number
             ->  norm clip  ->  step  ->  record

The mini-batch (src/minibatches.py) is frozen: it carries every input of the update (anchor
log-probs, correction weights and masks, a decision taken once per rollout) and nothing here
writes to it. The method (`cfg.method.build()`, src/algorithms/methods/) is used only
through `policy_step`, which the TRL and verl plugs call too: decide, then loss, with one set
of skip reasons.

Micro-batching (`train.micro_batch_size`): the forward/backward runs over micro-batches of
that many responses, with gradients accumulated so that the result is the whole
mini-batch's gradient: every micro-batch's loss is normalised by the whole mini-batch's
denominator (`Method.denominator`). What a method decides over the whole mini-batch (BAPO's
bounds, top_entropy's selection, ...) is decided once before the gradient passes, from a
no-grad pass, and each micro-batch gets its part (`Decision.take`). With one pass the method
decides on the loss's own forward.

The two speed shortcuts hand over numbers the update would otherwise recompute, bit for bit
(benchmarks/bench_update_reuse.py measures what they save): `kept_forward`, mini-batch 0's
behaviour forward run with grad, which update 0 backpropagates through instead of running it
again; and, for a micro-batched update with no optimizer step since the step's own pass
(`on_policy`), that pass's numbers (`MiniBatch.logp_start`) for the whole-batch decision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from src.algorithms import Decision, Method, PolicyLossOutput, update_metrics
from src.algorithms._checks import NonFiniteError
from src.algorithms.drift import drift_metrics, ratio_histogram
from src.corrections import METRIC_PREFIX, offpolicy_metrics
from src.minibatches import MiniBatch
from src.policy import Scorer, micro_batch
from src.schedule import capped_share

# The skip reasons, shared with the plugs. No loss-bearing token is not a numeric fault (a
# correction rejected every token, or a plug's micro-batch is all padding); the rest are.
NO_LOSS_TOKENS = "no loss-bearing token"
NON_FINITE_LOSS = "non-finite loss"
NON_FINITE_GRAD_NORM = "non-finite grad norm"


def non_finite_input(error: NonFiniteError) -> str:
    return f"non-finite input: {error}"


@dataclass(frozen=True)
class PolicyStep:
    """decide -> loss on one batch of tokens: the loss output (None when the loss was not
    taken; it carries its decision) and the reason to skip the optimizer step (None: take it)."""

    out: PolicyLossOutput | None
    skip_reason: str | None


def policy_step(method: Method, logp: Tensor, logp_old: Tensor, adv: Tensor, mask: Tensor,
                entropy: Tensor | None, *, seed: int, decision: Decision | None = None,
                denominator: Any = None, token_weight: Tensor | None = None) -> PolicyStep:
    """The method's decision (unless one is given, taken over a wider batch) and its loss on
    these tokens. The trainer, the TRL plug and the verl plug all call this."""
    if not bool(mask.any()):
        return PolicyStep(None, NO_LOSS_TOKENS)
    try:
        decision = decision or decide(method, logp, logp_old, adv, mask, entropy, seed)
        out = method.loss(logp, logp_old, adv, mask, decision, denominator=denominator,
                          token_weight=token_weight)
    except NonFiniteError as e:
        return PolicyStep(None, non_finite_input(e))
    finite = bool(torch.isfinite(out.loss))
    return PolicyStep(out, None if finite else NON_FINITE_LOSS)


def decide(method: Method, logp: Tensor, logp_old: Tensor, adv: Tensor, mask: Tensor,
           entropy: Tensor | None, seed: int) -> Decision:
    """The method's decision on these tokens' current numbers (detached by the method)."""
    if not method.decides:
        return Decision()
    return method.decide(method.decision_inputs(logp, logp_old, adv, mask, entropy, seed))


def policy_metrics(out: PolicyLossOutput, adv: Tensor, mask: Tensor, logp: Tensor,
                   entropy: Tensor | None) -> dict:
    """The update's metrics from the loss output (clip fractions, shares, bounds, ...) and its
    loss value: the record every caller of `policy_step` logs."""
    return {**update_metrics(out, adv, mask, logp, entropy), "loss": float(out.loss.detach())}


@dataclass
class UpdatePass:
    """What an update's forward/backward passes leave: the whole mini-batch's loss output,
    its logp and entropy [b, T], and the reason to skip the optimizer step (None: take it)."""

    out: PolicyLossOutput | None
    logp: Tensor | None
    entropy: Tensor | None
    skip_reason: str | None = None


@dataclass
class Update:
    """The update's parts: the method, the policy's scorer, the optimizer and its schedule,
    the mismatch correction (for its readings), and three settings (`train.grad_clip`,
    `offpolicy.weight_cap` for a metric, `logger.entropy_change`)."""

    method: Method
    scorer: Scorer
    optimizer: Any
    scheduler: Any
    correction: Any
    grad_clip: float
    weight_cap: float
    entropy_change: bool = False

    def __call__(self, mb: MiniBatch, version: int, *, on_policy: bool = False, seed: int = 0,
                 kept_forward: tuple[Tensor, Tensor] | None = None
                 ) -> tuple[dict, PolicyLossOutput | None, Tensor | None, Tensor | None]:
        """One optimizer update on `mb` by the weights at `version`; returns (record, loss
        output, logp, entropy). `on_policy`: no optimizer step since the step's own pass;
        `seed`: for a method's random decision; `kept_forward`: see the module's doc."""
        if not bool(mb.loss_mask.any()):  # e.g. the correction rejected every token
            return {"skipped": True, "skip_reason": NO_LOSS_TOKENS,
                    **mismatch_record(self.correction, mb)}, None, None, None
        self.optimizer.zero_grad(set_to_none=True)
        done = self.gradient(mb, on_policy, seed, kept_forward)
        out, logp, entropy = done.out, done.logp, done.entropy
        if done.skip_reason is not None:  # a non-finite input or loss: no step
            self.optimizer.zero_grad(set_to_none=True)
            return {"skipped": True, "skip_reason": done.skip_reason}, out, logp, entropy
        # clip_grad_norm_ returns the norm before clipping
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.scorer.model.parameters(),
                                                         self.grad_clip))
        record = self.record(mb, done, grad_norm, mb.lag(version))
        if not math.isfinite(grad_norm):
            self.optimizer.zero_grad(set_to_none=True)
            record.update(skipped=True, skip_reason=NON_FINITE_GRAD_NORM, grad_norm=None)
            return record, out, logp, entropy
        self.optimizer.step()
        self.scheduler.step()
        record.update(skipped=False, skip_reason=None)
        if self.entropy_change and record.get("entropy_mean") is not None:
            record.update(self.entropy_after(mb, record["entropy_mean"]))
        return record, out, logp, entropy

    def gradient(self, mb: MiniBatch, on_policy: bool = False, seed: int = 0,
                 kept_forward: tuple[Tensor, Tensor] | None = None) -> UpdatePass:
        """The gradient of the mini-batch's loss, accumulated into the parameters' .grad.

        One pass: forward (or the kept one), policy_step, backward. Micro-batched: the
        whole mini-batch's decision first, then per micro-batch a forward, its part of the
        loss and the backward, then the whole mini-batch's loss output for the metrics.
        """
        device = mb.logp_behavior.device
        mask, adv, weight = mb.loss_mask.to(device), mb.advantages.to(device), mb.loss_weight
        micro_batches = self.scorer.micro_slices(mb.data.size)
        if len(micro_batches) == 1:
            logp, entropy = kept_forward or self.scorer.forward(mb.data)
            step = policy_step(self.method, logp, mb.logp_old, adv, mask, entropy, seed=seed,
                               decision=mb.decision, token_weight=weight)
            if step.out is None:  # a non-finite input: nothing to report
                return UpdatePass(None, None, None, step.skip_reason)
            if step.skip_reason is None and step.out.loss.requires_grad:
                step.out.loss.backward()
            return UpdatePass(step.out, logp, entropy, step.skip_reason)
        try:
            decision = mb.decision or self.whole_batch_decision(mb, mask, adv, on_policy, seed)
        except NonFiniteError as e:
            return UpdatePass(None, None, None, non_finite_input(e))
        denominator = self.method.denominator(mask, decision)
        logp_all = torch.zeros(mask.shape, dtype=mb.logp_behavior.dtype, device=device)
        entropy_all = torch.zeros_like(logp_all)
        skip_reason = None
        for rows in micro_batches:
            data = micro_batch(mb.data, rows)
            if not bool(data.response_mask.any()):
                continue  # no response token: nothing to score, no gradient
            t = data.response_ids.shape[1]
            # A micro-batch whose tokens all left the loss (a correction's rejection) is only
            # scored, for telemetry, as is every one after a non-finite loss.
            carries_loss = bool(mask[rows, :t].any())
            grad = skip_reason is None and carries_loss and torch.is_grad_enabled()
            step = None
            with torch.set_grad_enabled(grad):
                logp, entropy = self.scorer.forward(data)
                if carries_loss:
                    step = policy_step(
                        self.method, logp, mb.logp_old[rows, :t], adv[rows], mask[rows, :t],
                        entropy, seed=seed, decision=decision.take(rows, t),
                        denominator=denominator,
                        token_weight=None if weight is None else weight[rows, :t])
                    if step.out is None:
                        return UpdatePass(None, None, None, step.skip_reason)
                    if step.skip_reason is None and step.out.loss.requires_grad:
                        step.out.loss.backward()
                    skip_reason = skip_reason or step.skip_reason
            logp_all[rows, :t], entropy_all[rows, :t] = logp.detach(), entropy
            del logp, entropy, step  # this micro-batch's graph and logits go here
        with torch.no_grad():  # the whole mini-batch's loss value and token states
            out = self.method.loss(logp_all, mb.logp_old, adv, mask, decision, token_weight=weight)
        return UpdatePass(out, logp_all, entropy_all, skip_reason)

    def whole_batch_decision(self, mb: MiniBatch, mask: Tensor, adv: Tensor, on_policy: bool,
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
                logp, entropy = self.scorer(mb.data, with_entropy=self.method.needs_entropy)
        return decide(self.method, logp, mb.logp_old, adv, mask, entropy, seed)

    def record(self, mb: MiniBatch, done: UpdatePass, grad_norm: float, lag: Tensor) -> dict:
        """The update's metrics: the method's (clip fractions, ...), the loss and the gradient's
        norm, the ratio histogram, the data's drift from its behaviour policy (`lag`: each
        token's age in updates), the mismatch readings."""
        out, logp, entropy = done.out, done.logp, done.entropy
        mask = mb.loss_mask
        record = {**policy_metrics(out, mb.advantages, mask, logp, entropy),
                  "grad_norm": grad_norm, "grad_clipped": grad_norm > self.grad_clip}
        record.update(ratio_histogram(out.ratio, mb.advantages, mask))
        # the drift of the data (every response token, a masked stale prefix included)
        response_mask = mb.data.response_mask.to(logp.device)
        record.update(drift_metrics(logp, mb.logp_behavior, response_mask, lag.to(logp.device),
                                    mb.token_weight))
        # what the behaviour weight's cap did (offpolicy.weight_rule masked or clamped these)
        record["behav_weight_capped_frac"] = (
            None if mb.token_weight is None else
            capped_share(mb.logp_old, mb.logp_behavior, response_mask, self.weight_cap))
        record.update(mismatch_record(self.correction, mb))
        return record

    @torch.no_grad()
    def entropy_after(self, mb: MiniBatch, before: float) -> dict:
        """Mean entropy of the mini-batch's response tokens under the weights the step just
        made, against `before` (the same tokens' mean in the update's own forward)."""
        _, entropy = self.scorer(mb.data)
        after = float(entropy.cpu()[mb.data.response_mask].double().mean())
        return {"entropy_after": after, "entropy_change": after - before}


def mismatch_record(correction, mb: MiniBatch) -> dict:
    """The gap between the sampler's and the trainer's behaviour log-probs on this update's
    response tokens (verl's off-policy metrics), and the correction's IS and rejection
    statistics on them, as `rollout_corr_*` keys."""
    device = mb.logp_behavior.device
    mask = mb.data.response_mask.to(device)
    if not bool(mask.any()):
        return {}
    sampler = mb.data.sampler_logp.to(device, mb.logp_behavior.dtype)
    metrics = offpolicy_metrics(mb.logp_behavior, sampler, mask)
    if correction.rollout_is or correction.rejection:
        metrics.update(correction.apply(mb.logp_behavior, sampler, mask).metrics)
    return {f"{METRIC_PREFIX}{k}": v for k, v in metrics.items()}
