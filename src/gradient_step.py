"""One optimizer update on one mini-batch, read top to bottom as CleanRL's update reads:

    gradient  ->  skip on a non-finite number  ->  norm clip  ->  step  ->  record

`GradientStep.__call__` is that sequence; `gradient` is the backward pass it starts with.
The method (`cfg.method.build()`, src/algorithms/methods/) is used only through its
interface: its decision over the whole mini-batch, then its loss; the update's metrics
(`src.algorithms.metrics`) and drift readings are computed once from the output over the
whole mini-batch.

Micro-batching (`train.micro_batch_size`): the forward/backward runs over micro-batches of
that many responses, with gradients accumulated so that the result is the whole mini-batch's
gradient: every micro-batch's loss is normalised by the whole mini-batch's denominator
(`Method.denominator`). What a method decides over the whole mini-batch (BAPO's bounds,
top_entropy's selection, m2po's bounds, ...) is decided once per update before the gradient
passes, from a no-grad pass over the micro-batches, and each micro-batch gets its part
(`Decision.take`). At an update with no optimizer step since the behaviour pass that pass's
numbers are the current policy's, so it is reused instead. A method that decides once per
rollout (top_entropy scope=rollout) decided on the behaviour pass (src/minibatches.py).
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

# The skip reason of an update with no loss-bearing token: not a numeric fault, no step.
NO_LOSS_TOKENS = "no loss-bearing token (a correction rejected them all)"


@dataclass
class UpdatePass:
    """What an update's forward/backward passes leave: the whole mini-batch's loss output
    (loss value, metrics, ratios, clip states), its logp and entropy [b, T], and the reason
    to skip the optimizer step (None: take it)."""

    out: PolicyLossOutput | None
    logp: Tensor | None
    entropy: Tensor | None
    skip_reason: str | None = None


@dataclass
class GradientStep:
    """The update's parts: the method, the policy's scorer, the optimizer and its schedule,
    the mismatch correction, and the three settings it reads (`train.grad_clip`,
    `offpolicy.weight_cap` for a metric, `logger.entropy_change`)."""

    method: Method
    scorer: Scorer
    optimizer: Any
    scheduler: Any
    correction: Any
    grad_clip: float
    weight_cap: float
    entropy_change: bool = False

    def __call__(self, mb: MiniBatch, version: int, *, on_policy: bool = False, seed: int = 0
                 ) -> tuple[dict, PolicyLossOutput | None, Tensor | None, Tensor | None]:
        """One optimizer update on `mb` by the weights at `version`; returns (record, loss
        output, logp, entropy). `on_policy`: no optimizer step since the behaviour pass (the
        weights are unchanged); `seed`: for a method's random decision."""
        if not bool(mb.loss_mask.any()):  # e.g. the correction rejected every token: no loss
            return {"skipped": True, "skip_reason": NO_LOSS_TOKENS,
                    **mismatch_record(self.correction, mb)}, None, None, None
        self.optimizer.zero_grad(set_to_none=True)
        done = self.gradient(mb, on_policy, seed)  # forward, decision, loss, backward
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
            record.update(skipped=True, skip_reason="non-finite grad norm", grad_norm=None)
            return record, out, logp, entropy
        self.optimizer.step()
        self.scheduler.step()
        record.update(skipped=False, skip_reason=None)
        if self.entropy_change and record.get("entropy_mean") is not None:
            record.update(self.entropy_after(mb, record["entropy_mean"]))
        return record, out, logp, entropy

    def gradient(self, mb: MiniBatch, on_policy: bool = False, seed: int = 0) -> UpdatePass:
        """The gradient of the mini-batch's loss, accumulated into the parameters' .grad.

        Top to bottom: the method's decision over the whole mini-batch, then per micro-batch
        a forward, the loss and its backward (`_micro_pass`), then the whole mini-batch's
        loss output (value, ratios, clip states) for the metrics. What saves work without
        changing a number: update 0 backpropagates through mini-batch 0's behaviour forward
        (`reuse_behaviour_forward`); in one pass the method decides on the loss's own
        forward, and with micro-batches `whole_batch_decision` reuses the behaviour pass's
        numbers at an update with no optimizer step since it.
        """
        device = mb.logp_behavior.device
        mask, adv, weight = mb.loss_mask.to(device), mb.advantages.to(device), mb.loss_weight
        micro_batches = self.scorer.micro_slices(mb.data.size)
        one_pass = len(micro_batches) == 1
        try:  # a decision taken once per rollout, or now over the whole mini-batch
            decision = mb.decision or (None if one_pass else
                                       self.whole_batch_decision(mb, mask, adv, on_policy, seed))
        except NonFiniteError as e:
            return UpdatePass(None, None, None, f"non-finite input: {e}")
        denominator = None if one_pass else self.method.denominator(mask, decision)
        logp_all = torch.zeros(mask.shape, dtype=mb.logp_behavior.dtype, device=device)
        entropy_all = torch.zeros_like(logp_all)
        finite = True
        for rows in micro_batches:
            data = mb.data if one_pass else micro_batch(mb.data, rows)
            if not (one_pass or bool(data.response_mask.any())):
                continue  # no response token: nothing to score, no gradient
            t = data.response_ids.shape[1]
            # A micro-batch whose tokens all left the loss (a correction's rejection) is only
            # scored, for telemetry, as is every one after a non-finite loss.
            carries_loss = one_pass or bool(mask[rows, :t].any())
            grad = finite and carries_loss and torch.is_grad_enabled()
            try:
                out, logp, entropy, decision, ok = self._micro_pass(
                    mb, data, rows, (mask, adv, weight), decision, denominator, seed, grad,
                    carries_loss)
            except NonFiniteError as e:
                return UpdatePass(None, None, None, f"non-finite input: {e}")
            finite = finite and ok
            if one_pass:  # its output is the whole mini-batch's
                return UpdatePass(out, logp, entropy, None if finite else "non-finite loss")
            logp_all[rows, :t], entropy_all[rows, :t] = logp.detach(), entropy
            del logp, entropy, out  # this micro-batch's graph and logits go here
        with torch.no_grad():  # the whole mini-batch's loss value and token states
            out = self.method.loss(logp_all, mb.logp_old, adv, mask, decision, token_weight=weight)
        return UpdatePass(out, logp_all, entropy_all, None if finite else "non-finite loss")

    def _micro_pass(self, mb: MiniBatch, data, rows: slice, inputs: tuple, decision: Decision | None,
                    denominator, seed: int, grad: bool, carries_loss: bool):
        """One micro-batch's forward (with grad when `grad`), then, when it carries loss, the
        method's decision if none is taken yet, its loss and the loss's backward. Returns
        (loss output or None, logp, entropy, the decision, whether the loss is finite)."""
        mask, adv, weight = inputs
        t = data.response_ids.shape[1]
        with torch.set_grad_enabled(grad):
            logp, entropy = reuse_behaviour_forward(mb) or self.scorer.forward(data)
            if not carries_loss:
                return None, logp, entropy, decision, True
            decision = decision or self.decide(mb, logp, entropy, mask, adv, seed)
            out = self.method.loss(logp, mb.logp_old[rows, :t], adv[rows], mask[rows, :t],
                                   decision.take(rows, t), denominator=denominator,
                                   token_weight=None if weight is None else weight[rows, :t])
            finite = bool(torch.isfinite(out.loss))
            if finite and out.loss.requires_grad:
                out.loss.backward()
        return out, logp, entropy, decision, finite

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
        return self.decide(mb, logp, entropy, mask, adv, seed)

    def decide(self, mb: MiniBatch, logp: Tensor, entropy: Tensor | None, mask: Tensor,
               adv: Tensor, seed: int) -> Decision:
        """The method's decision on the whole mini-batch's current numbers (detached)."""
        if not self.method.decides:
            return Decision()
        return self.method.decide(self.method.decision_inputs(
            logp, mb.logp_old, adv, mask, entropy, seed))

    def record(self, mb: MiniBatch, done: UpdatePass, grad_norm: float, lag: Tensor) -> dict:
        """The update's metrics: the method's (clip fractions, ...), the loss and the gradient's
        norm, the ratio histogram, the data's drift from its behaviour policy (`lag`: each
        token's age in updates), the mismatch readings."""
        out, logp, entropy = done.out, done.logp, done.entropy
        mask = mb.loss_mask
        metrics = update_metrics(out, mb.advantages, mask, logp, entropy)
        record = {**metrics, "loss": float(out.loss.detach()), "grad_norm": grad_norm,
                  "grad_clipped": grad_norm > self.grad_clip}
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


def reuse_behaviour_forward(mb: MiniBatch) -> tuple[Tensor, Tensor] | None:
    """Mini-batch 0's behaviour forward, run with grad for update 0 (src/minibatches.py
    `behaviour_pass`): handed over once, then dropped; None otherwise."""
    kept, mb.policy_pass = mb.policy_pass, None
    return kept


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
