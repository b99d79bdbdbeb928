"""Rollouts on the trainer's own HF model (the CPU default), with the decode loop of src/models/decoding.py.

At `rollout.precision=fp32` the live training model samples; at bf16, fp16 or int8 a copy of
it held in that precision does, refreshed from the trainer's weights before every rollout
(src/rollout/sampler_precision.py), as a serving engine gets the trainer's weights pushed.
"""

from __future__ import annotations

import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from src.models.decoding import decode
from src.rollout.base import Rollout, encode_prompts
from src.rollout.sampler_precision import refresh, sampler_copy


class HFRollout:
    """Samples from the live training model (fp32: weight sync is a no-op) or from its copy
    in `precision`."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                 batch_size: int = 512, min_new_tokens: int = 0, precision: str = "fp32",
                 sampler_entropy: bool = False):
        """`min_new_tokens`: no EOS before that many tokens (for timing fixed-length
        responses; 0, the default, samples the policy as it is). `precision`: the
        sampler's weights (`rollout.precision`). `sampler_entropy`: rollouts also keep the
        entropy of every drawn token's distribution (`rollout.behaviour=sampler`)."""
        if min_new_tokens < 0:
            raise ValueError(f"rollout.params.min_new_tokens must be >= 0, got {min_new_tokens}")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.min_new_tokens = min_new_tokens
        self.precision = precision
        self.sampler_entropy = sampler_entropy
        self._sampler = sampler_copy(model, precision)

    def sync_weights(self, model: torch.nn.Module) -> None:
        self.model = model

    def _sampling_model(self) -> torch.nn.Module:
        """The model that samples: the live one, or its low-precision copy holding the live
        model's current weights (refreshed at every call: an optimizer step may have come
        between two calls, and a copy costs less than one decode step per layer)."""
        if self._sampler is None:
            return self.model
        refresh(self._sampler, self.model, self.precision)
        return self._sampler

    def close(self) -> None:
        pass

    @torch.no_grad()
    def continue_responses(self, contexts: list[Tensor], caps: list[int], *, temperature: float = 1.0,
                           top_p: float = 1.0, seed: int = 0, greedy: bool = False
                           ) -> list[tuple[list[int], list[float]]]:
        """Continue each context (prompt ids + the response so far, 1-D, no padding) by up to
        `caps[i]` tokens under the current weights: a new prefill of the whole context, then
        the same decode loop as `generate`. Returns (new tokens, their sampler log-probs) per
        row, up to and including an EOS. Partial rollouts (src/schedule/sources/partial.py) use it."""
        tok = self.tokenizer
        width = max(int(c.numel()) for c in contexts)
        ids = torch.full((len(contexts), width), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros(len(contexts), width, dtype=torch.bool)
        for i, c in enumerate(contexts):  # left-padded, as `generate` pads its prompts
            ids[i, width - c.numel():], mask[i, width - c.numel():] = c, True
        model = self._sampling_model()
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        generator = torch.Generator(device=device).manual_seed(seed)
        try:
            out = decode(model, ids.to(device), mask.to(device), max_new_tokens=max(caps),
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         temperature=temperature, top_p=top_p, greedy=greedy, generator=generator)
        finally:
            model.train(was_training)
        return [(out.tokens[i, :min(int(out.lengths[i]), cap)].tolist(),
                 out.logp[i, :min(int(out.lengths[i]), cap)].tolist()) for i, cap in enumerate(caps)]

    @torch.no_grad()
    def generate(self, prompts: list[str], *, num_samples: int, max_new_tokens: int,
                 temperature: float = 1.0, top_p: float = 1.0, seed: int = 0) -> Rollout:
        tok = self.tokenizer
        enc = encode_prompts(tok, prompts)
        model = self._sampling_model()
        device = next(model.parameters()).device
        prompt_ids = enc["input_ids"].repeat_interleave(num_samples, dim=0)
        prompt_mask = enc["attention_mask"].repeat_interleave(num_samples, dim=0)
        was_training = model.training
        model.eval()
        generator = torch.Generator(device=device).manual_seed(seed)
        chunks = []
        try:
            for start in range(0, prompt_ids.shape[0], self.batch_size):
                # Pure ancestral sampling at `temperature` with HF's top-p filter; each row
                # leaves the batch at its EOS (src/models/decoding.py says why and what it saves).
                out = decode(model, prompt_ids[start:start + self.batch_size].to(device),
                             prompt_mask[start:start + self.batch_size].to(device),
                             max_new_tokens=max_new_tokens, eos_token_id=tok.eos_token_id,
                             pad_token_id=tok.pad_token_id, temperature=temperature, top_p=top_p,
                             min_new_tokens=self.min_new_tokens, generator=generator,
                             with_entropy=self.sampler_entropy)
                chunks.append(out)
        finally:
            model.train(was_training)
        # Trim to the longest response of the call (a response cut by max_new_tokens keeps all).
        width = max(int(c.lengths.max()) for c in chunks)
        response_ids = torch.cat([c.tokens[:, :width] for c in chunks])
        sampler_logp = torch.cat([c.logp[:, :width] for c in chunks])
        response_mask = torch.arange(width)[None, :] < torch.cat([c.lengths for c in chunks])[:, None]
        texts = tok.batch_decode(torch.where(response_mask, response_ids, tok.pad_token_id),
                                 skip_special_tokens=True)
        return Rollout(prompt_ids=prompt_ids, prompt_mask=prompt_mask.bool(),
                       response_ids=response_ids, response_mask=response_mask,
                       sampler_logp=sampler_logp, texts=texts,
                       group_ids=torch.arange(len(prompts)).repeat_interleave(num_samples),
                       sampler_entropy=torch.cat([c.entropy[:, :width] for c in chunks])
                       if self.sampler_entropy else None)
