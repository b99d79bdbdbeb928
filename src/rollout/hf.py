"""Rollouts with HF `generate` on the trainer's own model (the CPU default)."""

from __future__ import annotations

import torch
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

from src.rollout.base import Rollout, needs_special_tokens


class HFRollout:
    """Samples from the live training model, so weight sync is a no-op."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                 batch_size: int = 512):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size

    def sync_weights(self, model: torch.nn.Module) -> None:
        self.model = model

    def close(self) -> None:
        pass

    @torch.no_grad()
    def generate(self, prompts: list[str], *, num_samples: int, max_new_tokens: int,
                 temperature: float = 1.0, top_p: float = 1.0, seed: int = 0) -> Rollout:
        tok = self.tokenizer
        # Pure ancestral sampling: HF's default generation config would add top_k=50.
        gen_cfg = GenerationConfig(
            max_new_tokens=max_new_tokens, do_sample=True, temperature=temperature,
            top_k=0, top_p=top_p, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
            bos_token_id=tok.bos_token_id, output_scores=True, return_dict_in_generate=True)
        old_side, tok.padding_side = tok.padding_side, "left"
        try:
            enc = tok(prompts, return_tensors="pt", padding=True,
                      add_special_tokens=needs_special_tokens(tok, prompts))
        finally:
            tok.padding_side = old_side
        device = next(self.model.parameters()).device
        prompt_ids = enc["input_ids"].repeat_interleave(num_samples, dim=0)
        prompt_mask = enc["attention_mask"].repeat_interleave(num_samples, dim=0)
        was_training = self.model.training
        self.model.eval()
        chunks = []
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                for start in range(0, prompt_ids.shape[0], self.batch_size):
                    ids = prompt_ids[start:start + self.batch_size].to(device)
                    mask = prompt_mask[start:start + self.batch_size].to(device)
                    out = self.model.generate(input_ids=ids, attention_mask=mask,
                                              generation_config=gen_cfg)
                    new = out.sequences[:, ids.shape[1]:]
                    # Scores are the processed logits the sampler drew from (temperature,
                    # top-p applied), so their log-softmax is the sampler's log-prob.
                    scores = torch.stack(out.scores, dim=1).float()
                    logp = torch.log_softmax(scores, dim=-1).gather(-1, new[..., None])[..., 0]
                    chunks.append((new.cpu(), logp.cpu()))
        finally:
            self.model.train(was_training)
        width = max(c[0].shape[1] for c in chunks)
        response_ids = torch.full((prompt_ids.shape[0], width), tok.pad_token_id, dtype=torch.long)
        sampler_logp = torch.zeros(prompt_ids.shape[0], width)
        row = 0
        for new, logp in chunks:
            response_ids[row:row + new.shape[0], :new.shape[1]] = new
            sampler_logp[row:row + new.shape[0], :new.shape[1]] = logp
            row += new.shape[0]
        response_mask = _mask_through_first_eos(response_ids, tok.eos_token_id)
        sampler_logp = torch.where(response_mask, sampler_logp, 0.0)
        texts = tok.batch_decode(torch.where(response_mask, response_ids, tok.pad_token_id),
                                 skip_special_tokens=True)
        return Rollout(prompt_ids=prompt_ids, prompt_mask=prompt_mask.bool(),
                       response_ids=response_ids, response_mask=response_mask,
                       sampler_logp=sampler_logp, texts=texts,
                       group_ids=torch.arange(len(prompts)).repeat_interleave(num_samples))


def _mask_through_first_eos(ids: torch.Tensor, eos_id: int) -> torch.Tensor:
    """True up to and including the first EOS; a response cut by max_new_tokens keeps all.

    Padding only ever follows an EOS: a chunk stops early only when every row has ended,
    and a row without EOS ran to max_new_tokens, the widest any chunk can be.
    """
    is_eos = ids == eos_id
    return (is_eos.cumsum(dim=1) - is_eos.long()) == 0
