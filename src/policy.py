"""`Scorer`: how the trainer and the generation score tokens with the current weights, one
forward per micro-batch (`train.micro_batch_size`), at the rollout's temperature.

The forward itself is src/token_scoring.py's (`response_logprobs`, re-exported here). Two
opt-in layouts compute the same numbers to float rounding with less work, each behind its
`train.*` key and off by default, since they are not bit for bit the plain forward:
`train.shared_prefix` runs each distinct prompt once and its responses on its KV cache
(src/shared_prefix.py), and `train.pack` splits a forward's rows into length buckets so that
little of it is padding (src/packing.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from src.packing import bucket_rows, gather_buckets
from src.rollout import Rollout
from src.shared_prefix import shared_prefix_logprobs
from src.token_scoring import response_logprobs, sampled_logprobs

__all__ = ["Scorer", "micro_batch", "response_logprobs", "sampled_logprobs"]

def micro_batch(data: Rollout, rows: slice) -> Rollout:
    """A micro-batch: rows of a mini-batch, trimmed to their own longest prompt and response."""
    return data.select(torch.arange(rows.start, rows.stop))


@dataclass
class Scorer:
    """The policy as the trainer scores tokens with it: logp and entropy [b, T] of
    `softmax(logits / temperature)` (the distribution the rollout sampled from), one forward
    per micro-batch of `micro_batch_size` responses (None: the whole batch at once).

    Every scoring pass goes through it: the behaviour pass, the proximal policy's log-probs,
    the update's own forward and the rescoring after a step.
    """

    model: torch.nn.Module
    temperature: float = 1.0
    micro_batch_size: int | None = None
    # train.compile: "none" scores eagerly; a torch.compile backend compiles the model's
    # forward for scoring only (the decode loop keeps the eager module and its KV cache).
    compile: str = "none"
    # train.shared_prefix: each distinct prompt of a forward runs once (src/shared_prefix.py)
    shared_prefix: bool = False
    # train.pack: a forward's rows in length buckets with at most this share of padding
    # (src/packing.py); None: one forward of every row
    pack: float | None = None

    def __post_init__(self) -> None:
        self._forward = None if self.compile == "none" else torch.compile(
            self.model.forward, backend=self.compile, dynamic=True)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def micro_slices(self, size: int) -> list[slice]:
        """Rows of a batch of `size` responses, one slice per forward/backward pass."""
        step = self.micro_batch_size or size
        return [slice(start, min(start + step, size)) for start in range(0, size, step)]

    def forward(self, data: Rollout, *, with_entropy: bool = True) -> tuple[Tensor, Tensor | None]:
        """One forward over `data` as given (one micro-batch), with grad if it is enabled;
        under train.shared_prefix or train.pack, the same numbers (to rounding) from their
        forwards, each response position past its bucket's longest given 0."""
        if not (self.shared_prefix or self.pack is not None):
            return response_logprobs(self.model, data, with_entropy=with_entropy,
                                     temperature=self.temperature, forward=self._forward)
        buckets = bucket_rows(data.lengths(), self.pack)
        if self.shared_prefix:
            return shared_prefix_logprobs(self.model, data, buckets, with_entropy=with_entropy,
                                          temperature=self.temperature)
        parts = [response_logprobs(self.model, data.select(rows), with_entropy=with_entropy,
                                   temperature=self.temperature, forward=self._forward)
                 for rows in buckets]
        t_len = data.response_ids.shape[1]
        logp = gather_buckets([lp for lp, _ in parts], buckets, t_len)
        entropy = gather_buckets([e for _, e in parts], buckets, t_len) if with_entropy else None
        return logp, entropy

    def __call__(self, data: Rollout, *, with_entropy: bool = True) -> tuple[Tensor, Tensor | None]:
        """logp and entropy [b, T] of a batch, one forward per micro-batch."""
        parts = self.micro_slices(data.size)
        if len(parts) == 1:
            return self.forward(data, with_entropy=with_entropy)
        logp = entropy = None
        for rows in parts:
            lp, ent = self.forward(micro_batch(data, rows), with_entropy=with_entropy)
            if logp is None:
                logp = lp.new_zeros(data.response_ids.shape)
                entropy = lp.new_zeros(data.response_ids.shape) if with_entropy else None
            logp[rows, :lp.shape[1]] = lp
            if with_entropy:
                entropy[rows, :lp.shape[1]] = ent
        return logp, entropy
