"""The fixed probes a branch is measured on, drawn once per study, and their readings.

- **The sampled probe** (entropy, KL): `probe_prompts` held-out prompts x `probe_samples`
  responses, sampled once by the trunk's step-0 weights with the probe's own seed (the
  sampler draws from its own generator, so the trunk's RNG is untouched). A fixed probe, not
  the trunk's next mini-batch: every state and arm is read on the same tokens, so readings
  compare across the run, and no update ever trains on them (held-out prompts).
- **The correct probe** (log p(correct)): `correct_problems` held-out problems with the
  correct response as the task's format writes it, end token included: the bare answer
  where the task's verifier accepts it (chat sums: "Reply with the number only"), else the
  worked solution (the plain sums' strict `Answer:` format).

Readings are teacher-forced at the rollout's temperature (the distribution the run samples
and scores), under no grad.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from src.config_fields import ConfigError
from src.rollout import Rollout
from src.rollout.base import encode_prompts
from src.token_scoring import response_logits, response_logprobs


@dataclass
class Probes:
    sampled: Rollout
    correct: Rollout

    def save(self, path: Path) -> None:
        tmp = path.with_name(f".{path.name}.tmp")
        torch.save({"sampled": vars(self.sampled), "correct": vars(self.correct)}, tmp)
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Probes:
        saved = torch.load(path, weights_only=False)
        return cls(Rollout(**saved["sampled"]), Rollout(**saved["correct"]))


@dataclass
class Reading:
    """A policy's numbers on the probes: mean entropy per sampled-probe token, mean log p of
    a correct response per problem, the sampled probe's log-probs [N, V] (for the KL), and
    the per-response entropies and per-problem log-probs (for the probes' own noise)."""

    entropy: float
    logp_correct: float
    log_probs: Tensor
    per_response_entropy: Tensor
    per_problem_logp: Tensor


def build_probes(parts, settings) -> Probes:
    """The study's probes from the trunk's parts at step 0 (`settings`: MicroscopeConfig)."""
    cfg, task, tok = parts.cfg, parts.task, parts.tokenizer
    n = max(settings.probe_prompts, settings.correct_problems)
    problems = task.eval_problems(n)
    prompts = [parts.format_prompt(p.prompt) for p in problems]
    parts.backend.sync_weights(parts.model)
    sampled = parts.backend.generate(prompts[:settings.probe_prompts],
                                     num_samples=settings.probe_samples,
                                     max_new_tokens=cfg.rollout.max_new_tokens,
                                     temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
                                     seed=settings.probe_seed)
    chosen = problems[:settings.correct_problems]
    correct = teacher_forced(tok, prompts[:settings.correct_problems],
                             [reference_response(task, p) for p in chosen])
    return Probes(sampled, correct)


def reference_response(task, problem) -> str:
    """The shortest correct response the task's verifier accepts: the answer, else the
    worked solution."""
    for text in (problem.answer, problem.solution):
        if task.score(problem, text) >= 1.0:
            return text
    raise ConfigError(f"task {task.name}: its verifier accepts neither the answer nor the worked "
                      f"solution of held-out problem {problem.index}, so log p(correct) has no "
                      "target; this task cannot be studied with the microscope")


def teacher_forced(tokenizer, prompts: list[str], responses: list[str]) -> Rollout:
    """A rollout of given responses (each ended by the end token), laid out as the sampler
    lays out its own: prompts left-padded, responses right-padded."""
    enc = encode_prompts(tokenizer, prompts)
    ids = [tokenizer(r, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
           for r in responses]
    width = max(len(x) for x in ids)
    response_ids = torch.full((len(ids), width), tokenizer.pad_token_id, dtype=torch.long)
    response_mask = torch.zeros(len(ids), width, dtype=torch.bool)
    for i, x in enumerate(ids):
        response_ids[i, :len(x)], response_mask[i, :len(x)] = torch.tensor(x), True
    return Rollout(prompt_ids=enc["input_ids"], prompt_mask=enc["attention_mask"].bool(),
                   response_ids=response_ids, response_mask=response_mask,
                   sampler_logp=torch.zeros(response_ids.shape), texts=list(responses),
                   group_ids=torch.arange(len(ids)))


@torch.no_grad()
def read(model: torch.nn.Module, probes: Probes, temperature: float) -> Reading:
    """The policy's numbers on the probes (see `Reading`)."""
    sampled = probes.sampled
    logits = response_logits(model, sampled)[:, :-1]  # the last position predicts nothing
    mask = sampled.response_mask.to(logits.device)
    log_probs = torch.log_softmax(logits[mask].float() / temperature, dim=-1)
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    per_response = torch.zeros(mask.shape, dtype=torch.float64, device=logits.device)
    per_response[mask] = entropy.double()
    per_response = per_response.sum(1) / mask.sum(1).clamp(min=1)
    logp, _ = response_logprobs(model, probes.correct, with_entropy=False, temperature=temperature)
    correct_mask = probes.correct.response_mask.to(logp.device)
    per_problem = torch.where(correct_mask, logp, 0.0).double().sum(dim=1)
    return Reading(float(entropy.double().mean()), float(per_problem.mean()), log_probs,
                   per_response.cpu(), per_problem.cpu())


def change_se(before: Tensor, after: Tensor) -> float:
    """The standard error of the mean change over the probe's items (responses or problems):
    how far a probe of this size is from its population, state by state."""
    d = (after - before).double()
    return float(d.std(unbiased=True) / d.numel() ** 0.5) if d.numel() > 1 else float("nan")


def kl(before: Reading, after: Reading) -> float:
    """KL(before || after), mean per sampled-probe token (nats)."""
    p = before.log_probs.exp()
    return float((p * (before.log_probs - after.log_probs)).sum(-1).double().mean())
