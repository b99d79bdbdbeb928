"""A step's mini-batches: its training set split, each part with the log-probs its ratio needs.

One step of staleness k makes k optimizer updates from one rollout; update j uses data j
optimizer steps stale. `train.staleness_mode` says how the rollout is split: `minibatch`
shuffles the B = prompts x G responses into k mini-batches of B/k; `fixed_update` samples
k x prompts per rollout, so each of the k mini-batches holds B responses like a 1x update;
`epochs` makes k full-batch updates on one rollout of B (src/schedule/split.py
`minibatch_rows`, the one split, which the generation uses too).

The behaviour log-probs are recomputed by the trainer's own model on exactly the mini-batch
tensors the updates use, so update 0 is on-policy bit for bit (ratio == 1) and sampler drift
is only a metric. Without micro-batching, mini-batch 0's behaviour forward runs with grad and
is kept for update 0 (`KeptForward`), which backpropagates through it instead of
repeating it. Under `offpolicy.anchor` recompute and decoupled every mini-batch holding older
data is scored by the current weights too (the proximal policy, src/schedule/anchors.py).

Then, over the whole training set, the mismatch correction (src/corrections/: its IS weight
and rejection, as verl takes them before the mini-batch split) and a method's decision taken
once per rollout (top_entropy scope=rollout).

`build_minibatches` does all of it, once a step; a `MiniBatch` is frozen from then on. The
behaviour passes it ran are handed back to the rollouts that own them by the trainer
(`TrainingSet.store_behaviour`), not here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from src.algorithms import Decision
from src.policy import Scorer
from src.rollout import Rollout
from src.schedule import TrainingSet, anchored, needs_proximal


@dataclass(frozen=True)
class MiniBatch:
    """Every input of one update, built once (`build_minibatches`) and never written."""

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
    # The mismatch correction's IS weight [b, T] (None: no IS); the loss takes it times
    # token_weight (`loss_weight`).
    is_weight: Tensor | None = None
    rs_keep: Tensor | None = None  # [b, T] False on tokens the correction rejected (None: none)

    def __post_init__(self) -> None:  # the defaults that depend on other fields
        if self.logp_old is None:
            object.__setattr__(self, "logp_old", self.logp_behavior)
        if self.version is None:
            object.__setattr__(self, "version",
                               torch.zeros(self.data.response_ids.shape, dtype=torch.long))

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

    def lag(self, version: int) -> Tensor:
        """[b, T] lag in optimizer updates of each token at an update of the weights at
        `version` (optimizer steps applied)."""
        return version - self.version


class KeptForward:
    """Mini-batch 0's behaviour forward, run with grad: update 0 runs the same weights on the
    same tensors, so it backpropagates through this one instead of running it again. Its
    graph holds the forward's activations, so it is handed over once and dropped as it is."""

    def __init__(self, logp: Tensor, entropy: Tensor):
        self._forward: tuple[Tensor, Tensor] | None = (logp, entropy)

    def take(self) -> tuple[Tensor, Tensor] | None:
        """(logp, entropy) the first time, None after."""
        forward, self._forward = self._forward, None
        return forward


@dataclass(frozen=True)
class StepBatches:
    """A step's mini-batches, in update order, and mini-batch 0's kept forward (None with
    micro-batching, or when its behaviour pass was stored earlier)."""

    batches: list[MiniBatch]
    kept_forward: KeptForward | None


def build_minibatches(training: TrainingSet, parts: list[Tensor], scorer: Scorer, version: int,
                      offpolicy, correction, method, seed: int) -> StepBatches:
    """The mini-batches of `training` (rows `parts`, src/schedule/split.py), each with the
    log-probs of the weights that generated it and those its ratio is taken against
    (`offpolicy`: the config's section; `version`: the current weights' policy version),
    then the mismatch `correction` over the whole training set and `method`'s decision where
    it decides once per rollout (seeded by `seed`)."""
    stale = bool(((training.version < version) & training.data.response_mask).any())
    proximal = needs_proximal(offpolicy.anchor) and stale
    batches: list[MiniBatch] = []
    kept_forward = None
    with torch.no_grad():
        for rows in parts:
            mb, kept = _minibatch(training, rows, scorer, proximal, not batches, offpolicy)
            batches.append(mb)
            kept_forward = kept_forward or (kept and KeptForward(*kept))
    if correction.active:
        batches = corrected(correction, batches)
    if method.decision_scope == "rollout":
        batches = decided_per_rollout(method, batches, seed)
    return StepBatches(batches, kept_forward)


def _minibatch(training: TrainingSet, rows: Tensor, scorer: Scorer, proximal: bool, first: bool,
               offpolicy) -> tuple[MiniBatch, tuple[Tensor, Tensor] | None]:
    data = training.data.select(rows)
    t = data.response_ids.shape[1]
    pending = training.pending[rows]
    logp_b = training.logp_behavior[rows, :t]
    ent_b = training.entropy_behavior[rows, :t]
    logp_now = ent_now = kept = None
    if proximal or bool(pending.any()):
        logp_now, ent_now, kept = behaviour_pass(scorer, data, first=first)
        pend = pending[:, None].to(logp_now.device)
        logp_b = torch.where(pend, logp_now, logp_b.to(logp_now.device))
        ent_b = torch.where(pend, ent_now, ent_b.to(ent_now.device))
    else:
        device = scorer.device
        logp_b, ent_b = logp_b.to(device), ent_b.to(device)
    logp_old, weight = anchored(offpolicy.anchor, logp_b, logp_now if proximal else None,
                                data.response_mask.to(logp_b.device),
                                offpolicy.weight_cap, offpolicy.weight_rule)
    mb = MiniBatch(rows, data, logp_b, ent_b, training.advantages[rows],
                   training.rewards[rows], training.version[rows, :t],
                   loss_keep=training.loss_keep[rows, :t],
                   logp_old=logp_old, token_weight=weight,
                   logp_start=logp_now, entropy_start=ent_now)
    return mb, kept


def behaviour_pass(scorer: Scorer, data: Rollout, first: bool
                   ) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor] | None]:
    """(logp_b, entropy_b, the forward kept for update 0) of a mini-batch.

    Update 0 runs the behaviour weights on mini-batch 0's tensors, so with one pass per
    update its forward is this one: it runs with grad and is kept, and logp_b is the
    same numbers detached. Micro-batched updates keep no graph between their passes.
    """
    if not (first and len(scorer.micro_slices(data.size)) == 1):
        return *scorer(data), None
    with torch.enable_grad():
        logp, entropy = scorer(data)
    return logp.detach(), entropy, (logp, entropy)


def corrected(correction, batches: list[MiniBatch]) -> list[MiniBatch]:
    """The mismatch correction over the step's whole training set, as verl takes it on the
    whole batch before the mini-batch split (its batch normalisation is the whole
    batch's): the IS weight joins each mini-batch's token weight, rejected tokens leave
    its loss mask; under bypass_mode the ratio is taken against the sampler's log-probs."""
    device = batches[0].logp_behavior.device
    stacked = _stack([mb.logp_behavior for mb in batches])
    sampler = _stack([mb.data.sampler_logp.to(device, stacked.dtype) for mb in batches])
    mask = _stack([mb.data.response_mask.to(device) for mb in batches])
    done = correction.apply(stacked, sampler, mask)
    out, start = [], 0
    for mb in batches:
        rows, t = mb.logp_behavior.shape
        part = slice(start, start + rows)
        start += rows
        changes = {}
        if correction.bypass_mode:
            changes["logp_old"] = mb.data.sampler_logp.to(device, stacked.dtype)
        if correction.rejection:
            keep = done.keep[part, :t].cpu()
            changes["rs_keep"] = keep
            changes["loss_keep"] = keep if mb.loss_keep is None else mb.loss_keep & keep
        if done.weight is not None:
            changes["is_weight"] = done.weight[part, :t]
        out.append(replace(mb, **changes))
    return out


def decided_per_rollout(method, batches: list[MiniBatch], seed: int) -> list[MiniBatch]:
    """The method's decision once over the whole rollout, from the behaviour pass: its
    mini-batches stacked in order (padded to the longest), each given its rows."""
    device = batches[0].logp_behavior.device
    logp = _stack([mb.logp_old for mb in batches])
    mask = _stack([mb.loss_mask.to(device) for mb in batches])
    adv = _stack([mb.advantages.to(device)[:, None].expand_as(mb.logp_behavior) for mb in batches])
    entropy = _stack([mb.entropy_behavior for mb in batches])
    decision = method.decide(method.decision_inputs(logp, logp, adv, mask, entropy, seed))
    out, start = [], 0
    for mb in batches:
        rows, t = mb.logp_behavior.shape
        out.append(replace(mb, decision=decision.take(slice(start, start + rows), t)))
        start += rows
    return out


def _stack(tensors: list[Tensor]) -> Tensor:
    """Mini-batch tensors [b, T_b] stacked in order, right-padded to the longest. Every
    tensor of a mini-batch is T_b wide (its responses' length), so the longest of any one
    list is the longest mini-batch."""
    length = max(t.shape[1] for t in tensors)
    return torch.cat([torch.nn.functional.pad(t, (0, length - t.shape[1])) for t in tensors])
