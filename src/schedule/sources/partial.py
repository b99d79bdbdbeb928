"""partial (Kimi k1.5, BAPO section 5.3, slime, verl): a per-step token budget.

Each step starts new groups (the step's problems and seed) and continues every response
left unfinished by earlier steps, each by at most `token_budget` tokens, under the current
weights (a new prefill of prompt + prefix). A response ends at its EOS or at
`max_new_tokens`. A group whose responses have all ended is trained on at the step it ends;
each of its tokens keeps the behaviour log-prob and policy version of the weights that
generated it, scored right after generation. A step at which no group ended only generates.
`mask_stale_prefix` keeps tokens older than their response's last segment out of the loss
(slime's --mask-offpolicy-in-partial-rollout). Needs the hf rollout engine
(`continue_responses`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from src.config_fields import ConfigError, at_least, setting
from src.rollout import Rollout
from src.schedule.sources._base import (
    Generation,
    Source,
    SourceParams,
    StepData,
    register,
    required,
)
from src.schedule.split import minibatch_size
from src.schedule.stored import StoredRollout


@dataclass
class InFlight:
    """One response being generated across steps (a checkpoint carries them)."""

    slot: int  # the step that started its group
    group: int  # its prompt's index within that step
    problem: object  # the task's problem, for the verifier once it ends
    prompt: Tensor  # 1-D prompt ids, no padding
    tokens: list[int] = field(default_factory=list)
    sampler_logp: list[float] = field(default_factory=list)
    logp_behavior: list[float] = field(default_factory=list)
    entropy_behavior: list[float] = field(default_factory=list)
    version: list[int] = field(default_factory=list)
    done: bool = False

    def context(self) -> Tensor:
        return torch.cat([self.prompt, torch.tensor(self.tokens, dtype=self.prompt.dtype)])


@dataclass
class PartialParams(SourceParams):
    token_budget: int | None = setting(
        None, "new tokens a response may get per step (unfinished ones continue next step)",
        required("partial", "the new tokens a response may get per step", at_least(1)))
    mask_stale_prefix: bool = setting(
        False, "true keeps tokens older than the response's last segment out of the loss")


@register
class Partial(Source):
    name = "partial"
    help = ("on the groups whose responses all ended this step, each response continued by "
            "at most `token_budget` tokens a step")
    rank = 3
    Params = PartialParams
    whole_rollouts = False  # a response's tokens come from several versions

    def __init__(self, token_budget: int, mask_stale_prefix: bool):
        self.token_budget, self.mask_stale_prefix = token_budget, mask_stale_prefix
        self.responses: list[InFlight] = []

    @classmethod
    def from_params(cls, params: PartialParams) -> Partial:
        return cls(params.token_budget, bool(params.mask_stale_prefix))

    @classmethod
    def check(cls, params: PartialParams, cfg) -> None:
        if cfg.rollout.backend != "hf":
            raise ConfigError("offpolicy.source =partial continues responses on the hf rollout "
                              "engine only; use rollout=hf")

    def next(self, gen: Generation) -> StepData | None:
        """Start this step's groups and continue every unfinished response, each by at most
        `token_budget` tokens under the current weights; score the new tokens with these
        weights; train on the groups that ended (None if none did)."""
        cfg, step = gen.cfg, gen.step
        limit = cfg.rollout.max_new_tokens
        eos = gen.tokenizer.eos_token_id
        carried = [r for r in self.responses if not r.done]
        problems, roll = gen.sample(step, min(self.token_budget, limit))
        touched = []
        for i in range(roll.size):
            g, n = int(roll.group_ids[i]), int(roll.lengths()[i])
            r = InFlight(step, g, problems[g], roll.prompt_ids[i][roll.prompt_mask[i]])
            r.tokens, r.sampler_logp = roll.response_ids[i, :n].tolist(), roll.sampler_logp[i, :n].tolist()
            touched.append((r, 0))
            self.responses.append(r)
        if carried:
            caps = [min(self.token_budget, limit - len(r.tokens)) for r in carried]
            new = gen.continue_responses([r.context() for r in carried], caps, seed=gen.seed(3))
            for r, (tokens, logps) in zip(carried, new, strict=True):
                touched.append((r, len(r.tokens)))
                r.tokens += tokens
                r.sampler_logp += logps
        # The new tokens' behaviour log-probs, by the weights that generated them, in passes
        # of an update's width.
        width = cfg.train.micro_batch_size or minibatch_size(cfg.train)
        pad = gen.tokenizer.pad_token_id
        with torch.no_grad():
            for start in range(0, len(touched), width):
                part = touched[start:start + width]
                scored, _ = responses_rollout([r for r, _ in part], pad, [""] * len(part), per_token=False)
                logp, entropy = gen.score(scored)
                for row, (r, begin) in enumerate(part):
                    r.logp_behavior += logp[row, begin:len(r.tokens)].tolist()
                    r.entropy_behavior += entropy[row, begin:len(r.tokens)].tolist()
                    r.version += [gen.version] * (len(r.tokens) - begin)
                    r.done = (bool(r.tokens) and r.tokens[-1] == eos) or len(r.tokens) >= limit
        ended = [r for group in self.completed_groups() for r in group]
        if not ended:
            return None
        texts = gen.tokenizer.batch_decode([r.tokens for r in ended], skip_special_tokens=True)
        data, per_token = responses_rollout(ended, pad, texts)
        scores = torch.tensor([gen.task.score(r.problem, text) for r, text in zip(ended, texts, strict=True)])
        version = per_token["token_version"]
        keep = ~stale_prefix(version, data.response_mask) if self.mask_stale_prefix else None
        stored = gen.reward(step, data, scores, int(version[data.response_mask].min()),
                            logp_behavior=per_token["logp_behavior"],
                            entropy_behavior=per_token["entropy_behavior"], token_version=version,
                            loss_keep=keep)
        return StepData(stored, [stored])

    def completed_groups(self) -> list[list[InFlight]]:
        """Groups whose every response has ended, oldest first; they leave the pool."""
        groups: dict[tuple[int, int], list[InFlight]] = {}
        for r in self.responses:
            groups.setdefault((r.slot, r.group), []).append(r)
        done = [g for key, g in sorted(groups.items()) if all(r.done for r in g)]
        ended = {id(r) for g in done for r in g}
        self.responses = [r for r in self.responses if id(r) not in ended]
        return done

    def telemetry(self, step: int, trained: list[StoredRollout]) -> dict:
        """The responses in flight; with data, what `rollout_fields` says of it."""
        held = {"in_flight_responses": len(self.responses)}
        return {**held, **super().telemetry(step, trained)} if trained else held

    def state_dict(self) -> dict:
        return {"responses": list(self.responses)}

    def load_state_dict(self, state: dict) -> None:
        self.responses = list(state["responses"])

    def in_flight(self) -> list:
        return list(self.responses)


def responses_rollout(responses: list[InFlight], pad_id: int, texts: list[str],
                      per_token: bool = True) -> tuple[Rollout, dict]:
    """Responses as one rollout (group-major, in order). With `per_token`, also their
    behaviour log-probs, entropies and versions [B, T] (every token must have them)."""
    b = len(responses)
    p = max(int(r.prompt.numel()) for r in responses)
    t = max(len(r.tokens) for r in responses)
    prompt_ids = torch.full((b, p), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros(b, p, dtype=torch.bool)
    response_ids = torch.full((b, t), pad_id, dtype=torch.long)
    response_mask = torch.zeros(b, t, dtype=torch.bool)
    keys = ("sampler_logp", *(("logp_behavior", "entropy_behavior", "version") if per_token else ()))
    tables = {k: torch.zeros(b, t, dtype=torch.long if k == "version" else torch.float32) for k in keys}
    group_ids, groups = [], {}
    for i, r in enumerate(responses):
        n, m = int(r.prompt.numel()), len(r.tokens)
        prompt_ids[i, p - n:], prompt_mask[i, p - n:] = r.prompt, True
        response_ids[i, :m], response_mask[i, :m] = torch.tensor(r.tokens, dtype=torch.long), True
        for key, table in tables.items():
            table[i, :m] = torch.tensor(getattr(r, key), dtype=table.dtype)
        group_ids.append(groups.setdefault((r.slot, r.group), len(groups)))
    roll = Rollout(prompt_ids, prompt_mask, response_ids, response_mask, tables.pop("sampler_logp"),
                   texts, torch.tensor(group_ids))
    if "version" in tables:
        tables["token_version"] = tables.pop("version")
    return roll, tables


def stale_prefix(version: Tensor, mask: Tensor) -> Tensor:
    """[B, T] True on tokens generated by an older version than their response's last one."""
    latest = torch.where(mask, version, torch.full_like(version, -1)).max(dim=1, keepdim=True).values
    return mask & (version < latest)
