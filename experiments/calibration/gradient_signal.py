"""How much of one update's policy gradient is signal, and what one Adam step does.

    python experiments/calibration/gradient_signal.py [--batches 8] [overrides ...]

On the warm start (any config overrides apply, e.g. train.prompts_per_step=64):
1. Draws `--batches` independent on-policy rollouts of prompts_per_step x group_size and
   computes each one's ppo policy gradient g_i (token-mean, ratio 1). The mean cosine
   between two batches' gradients estimates the signal share |mu|^2 / (|mu|^2 + sigma^2)
   of one batch's gradient; averaging n batches raises it (printed for n = 1, 2, 4).
2. Takes one step of a fresh optimizer (the run's `train.optimizer`, grad clip) along g_0 and,
   for comparison, along the mean gradient of the other batches, at several learning
   rates, and measures on held-out data what the step did: KL(old || new) per response
   token on a fresh rollout, the change of the mean log-likelihood of the reference worked
   solutions of 256 held-out problems (the SFT skill), and the change of the on-policy
   surrogate sum(A * logp) / tokens on a fresh batch (positive: the step helped there).

It writes calibration/gradient_signal.json and prints a table. Seeded; about a minute.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from src.pinning import pin_process  # noqa: E402

if __name__ == "__main__":
    pin_process()  # the numerics, before torch loads (src/pinning.py)

import torch  # noqa: E402

from src.algorithms import group_advantages, policy_loss  # noqa: E402
from src.build import build_model, build_optimizer, build_task  # noqa: E402
from src.policy import response_logprobs  # noqa: E402
from src.rollout.hf import HFRollout  # noqa: E402
from src.warm_start.sft import sft_batch  # noqa: E402
from tests.conftest import compose  # noqa: E402


def rollout(cfg, task, backend, start: int, seed: int):
    n = cfg.train.prompts_per_step
    problems = [task.problem(start + i) for i in range(n)]
    roll = backend.generate([p.prompt for p in problems], num_samples=cfg.train.group_size,
                            max_new_tokens=cfg.rollout.max_new_tokens, temperature=1.0, seed=seed)
    rewards = torch.tensor([task.score(problems[g], t)
                            for g, t in zip(roll.group_ids.tolist(), roll.texts, strict=True)])
    adv = group_advantages(rewards, cfg.train.group_size).advantages
    return roll, adv


def flat_grad(model, roll, adv) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    logp, _ = response_logprobs(model, roll, with_entropy=False)
    out = policy_loss("ppo", logp, logp.detach(), adv, roll.response_mask)
    out.loss.backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def set_grad(model, g: torch.Tensor) -> None:
    offset = 0
    for p in model.parameters():
        n = p.numel()
        p.grad = g[offset:offset + n].view_as(p).clone()
        offset += n


@torch.no_grad()
def reference_nll(model, tokenizer, problems) -> float:
    batch = sft_batch(tokenizer, problems)
    return float(model(**batch, use_cache=False).loss)


@torch.no_grad()
def surrogate_value(model, roll, adv) -> float:
    logp, _ = response_logprobs(model, roll, with_entropy=False)
    m = roll.response_mask
    return float((logp * adv[:, None] * m).sum() / m.sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--lrs", default="2.5e-5,5e-5,1e-4,2e-4")
    parser.add_argument("--out", default=str(HERE / "gradient_signal.json"))
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    cfg = compose(["logger.progress=false", *args.overrides])
    torch.manual_seed(0)
    torch.set_num_threads(cfg.train.threads)
    task = build_task(cfg.task)
    model, tokenizer, info = build_model(cfg.model, task, torch.device("cpu"), progress=False,
                                         cache_dir=cfg.cache_dir, numerics=cfg.numerics)
    backend = HFRollout(model, tokenizer)
    start = int(info.get("next_train_index", 0))
    n = cfg.train.prompts_per_step
    grads, tokens = [], []
    for i in range(args.batches):
        roll, adv = rollout(cfg, task, backend, start + i * n, seed=1000 + i)
        grads.append(flat_grad(model, roll, adv))
        tokens.append(int(roll.response_mask.sum()))
    G = torch.stack(grads)
    unit = G / G.norm(dim=1, keepdim=True)
    cos = unit @ unit.T
    off = cos[~torch.eye(len(G), dtype=torch.bool)]
    signal = {"cos_between_batches_mean": float(off.mean()), "cos_between_batches_sd": float(off.std()),
              "grad_norm_mean": float(G.norm(dim=1).mean())}
    for m in (2, 4):  # cosine between the means of two disjoint sets of m batches
        if 2 * m <= len(G):
            a, b = G[:m].mean(0), G[m:2 * m].mean(0)
            signal[f"cos_mean_of_{m}"] = float(a @ b / (a.norm() * b.norm()))

    held_problems = task.eval_problems(256)
    fresh_roll, fresh_adv = rollout(cfg, task, backend, start + args.batches * n + 10_000, seed=77)
    probe_roll, _ = rollout(cfg, task, backend, start + args.batches * n + 20_000, seed=78)
    base_nll = reference_nll(model, tokenizer, held_problems)
    base_sur = surrogate_value(model, fresh_roll, fresh_adv)
    with torch.no_grad():
        base_logp, _ = response_logprobs(model, probe_roll, with_entropy=False)
    directions = {"one batch (g_0)": G[0], f"mean of {len(G) - 1} batches": G[1:].mean(0)}
    steps = []
    for lr in (float(x) for x in args.lrs.split(",")):
        for label, g in directions.items():
            moved = copy.deepcopy(model)
            step_cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, lr=lr))
            opt, _ = build_optimizer(step_cfg.train, moved)  # the run's optimizer (train.optimizer)
            set_grad(moved, g)
            torch.nn.utils.clip_grad_norm_(moved.parameters(), cfg.train.grad_clip)
            opt.step()
            with torch.no_grad():
                new_logp, _ = response_logprobs(moved, probe_roll, with_entropy=False)
            m = probe_roll.response_mask
            log_r = (new_logp - base_logp)[m]
            steps.append({
                "lr": lr, "direction": label,
                "kl_k3_per_token": float((log_r.exp() - 1 - log_r).mean()),
                "abs_log_ratio_mean": float(log_r.abs().mean()),
                "reference_nll_change": reference_nll(moved, tokenizer, held_problems) - base_nll,
                "surrogate_change": surrogate_value(moved, fresh_roll, fresh_adv) - base_sur,
            })
    result = {"overrides": args.overrides, "batches": args.batches, "prompts": n,
              "group_size": cfg.train.group_size, "tokens_per_batch": tokens,
              "signal": signal, "one_step": steps, "reference_nll": base_nll}
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(signal, indent=2))
    print(f"{'lr':>8} {'direction':>22} {'KL/token':>10} {'|log r|':>9} {'ref NLL chg':>12} {'surrogate chg':>14}")
    for s in steps:
        print(f"{s['lr']:8.1e} {s['direction']:>22} {s['kl_k3_per_token']:10.2e} "
              f"{s['abs_log_ratio_mean']:9.4f} {s['reference_nll_change']:12.4f} {s['surrogate_change']:14.5f}")


if __name__ == "__main__":
    main()
