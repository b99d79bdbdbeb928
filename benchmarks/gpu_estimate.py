"""ESTIMATE of the GPU check's time on one H100/H200, computed on CPU (nothing here is a GPU
measurement).

    python benchmarks/gpu_estimate.py [--size gpu] [--us-per-op 10] [--mfu 0.4]

At these sizes (a ~78M model, 512 responses of ~50 tokens) eager PyTorch on a GPU is
bound by launching kernels, not by FLOPs, so each phase is estimated two ways and the
larger one is taken:
- FLOPs / (peak * an assumed MFU): the model FLOPs of benchmarks/gpu_sizing.py, with the
  token counts of the task's reference solutions (the warm-started policy answers about as
  long), at `--mfu` of the 989.4 TFLOP/s dense bf16 peak;
- launches: the number of aten ops the phase dispatches, COUNTED here on CPU with the same
  code (HF generate as the rollout calls it, the trainer's scoring and loss, AdamW with
  foreach as on CUDA), times an ASSUMED `--us-per-op` (eager PyTorch on a fast host:
  about 5-15 us per op). Decoding is taken to run all `rollout.max_new_tokens` steps (HF
  generate stops when the slowest of the 512 samples does).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import _setup  # noqa: E402, F401 - this checkout first on sys.path

from src.pinning import pin_process  # noqa: E402

if __name__ == "__main__":
    pin_process()  # the numerics, before torch loads (src/pinning.py)

import gpu_check  # noqa: E402
import gpu_sizing  # noqa: E402
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

H100_PEAK_TFLOPS = 989.4


class OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def count_ops(fn) -> int:
    with OpCounter() as counter:
        fn()
    return counter.ops


def measure(cfg) -> dict:
    """Counted on CPU: token lengths of the task, and aten ops per phase of the real code."""
    from src.algorithms import policy_loss
    from src.build import build_task
    from src.models.tiny import build_tiny_model
    from src.models.tokenizer import train_tokenizer
    from src.policy import response_logprobs
    from src.rollout import Rollout
    from src.rollout.hf import HFRollout
    from src.warm_start import resolve_configs
    from src.warm_start.sft import sft_batch

    task = build_task(cfg.task)
    arch, sft = resolve_configs(dict(cfg.model.architecture), dict(cfg.model.sft))
    tok = train_tokenizer(task.corpus(int(arch["tokenizer_corpus"])), arch["vocab_size"])
    problems = [task.problem(i) for i in range(2000)]
    prompt_lens = [len(x) for x in tok([p.prompt for p in problems])["input_ids"]]
    answer_lens = [len(x) + 1 for x in tok([p.solution for p in problems],
                                           add_special_tokens=False)["input_ids"]]
    model = build_tiny_model(tok, **{k: arch[k] for k in (
        "arch", "hidden_size", "num_layers", "num_heads", "intermediate_size",
        "max_position_embeddings", "tie_word_embeddings")})
    shape = gpu_check.model_shape(model)
    backend = HFRollout(model, tok)
    prompts = [p.prompt for p in problems[:4]]

    def rollout(n):
        def run():
            roll = backend.generate(prompts, num_samples=1, max_new_tokens=n, seed=0)
            # a random model rarely ends all 4 samples early; if it did, the count is short
            assert roll.response_ids.shape[1] == n, "generation stopped early; change the seed"
        return run

    # ops per decode step: the difference of two lengths (prefill and set-up cancel)
    per_decode = (count_ops(rollout(12)) - count_ops(rollout(4))) / 8
    t = max(answer_lens)
    data = Rollout(prompt_ids=torch.ones(2, 20, dtype=torch.long),
                   prompt_mask=torch.ones(2, 20, dtype=torch.bool),
                   response_ids=torch.ones(2, t, dtype=torch.long),
                   response_mask=torch.ones(2, t, dtype=torch.bool),
                   sampler_logp=torch.zeros(2, t), texts=["", ""], group_ids=torch.zeros(2))
    params = cfg.method.kwargs(cfg.rollout.max_new_tokens)

    def score():
        with torch.no_grad():
            response_logprobs(model, data)

    def train():
        logp, ent = response_logprobs(model, data)
        out = policy_loss(cfg.method.objective, logp, logp.detach() - 0.1,
                          torch.tensor([1.0, -1.0]), data.response_mask, entropy=ent, **params)
        out.loss.backward()

    def sft_step():
        batch = sft_batch(tok, problems[:8], pack_len=int(sft["pack_len"]) or None)
        model(**batch, use_cache=False).loss.backward()

    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)  # CUDA's default
    train()
    adam = count_ops(opt.step)
    return {"shape": shape, "prompt_len_mean": statistics.fmean(prompt_lens),
            "answer_len_mean": statistics.fmean(answer_lens), "answer_len_max": max(answer_lens),
            "ops_decode_step": per_decode, "ops_score": count_ops(score),
            "ops_train": count_ops(train), "ops_adamw": adam, "ops_sft_step": count_ops(sft_step),
            "sft": sft}


def estimate(cfg, m: dict, us_per_op: float, mfu: float, steps: int) -> dict:
    peak = H100_PEAK_TFLOPS * 1e12 * mfu
    t = cfg.train
    batch = t.prompts_per_step * t.group_size
    shape = m["shape"]
    flops = gpu_sizing.step_flops(shape["n_matmul"], shape["layers"], shape["hidden"],
                                  prompt_tokens=batch * m["prompt_len_mean"],
                                  response_tokens=batch * m["answer_len_mean"], sequences=batch,
                                  epochs=t.epochs)
    launches = {
        "rollout": cfg.rollout.max_new_tokens * m["ops_decode_step"],
        "behavior": t.staleness * m["ops_score"],
        "update": t.staleness * t.epochs * (m["ops_train"] + m["ops_adamw"]),
    }
    phases = {k: {"flops_s": flops[k] / peak, "launch_s": launches[k] * us_per_op * 1e-6}
              for k in flops}
    for v in phases.values():
        v["estimate_s"] = max(v["flops_s"], v["launch_s"])
    step_s = sum(v["estimate_s"] for v in phases.values())
    sft = m["sft"]
    sft_tokens = sft["batch_size"] * (m["prompt_len_mean"] + m["answer_len_mean"])
    sft_flops = 3 * gpu_sizing.forward_flops(shape["n_matmul"], shape["layers"], shape["hidden"],
                                             sft_tokens, m["prompt_len_mean"] + m["answer_len_mean"])
    sft_step_s = max(sft_flops / peak, (m["ops_sft_step"] + m["ops_adamw"]) * us_per_op * 1e-6)
    # warm-start eval: greedy + sampled generate over eval_problems, in batches of 256
    gen_calls = math.ceil(sft["eval_problems"] / 256) * (1 + sft["eval_samples"])
    warm_eval_s = gen_calls * sft["max_new_tokens"] * m["ops_decode_step"] * us_per_op * 1e-6
    eval_s = 2 * cfg.rollout.max_new_tokens * m["ops_decode_step"] * us_per_op * 1e-6
    warm_s = sft["steps"] * sft_step_s + warm_eval_s
    return {"phases": phases, "step_s": step_s, "sft_step_s": sft_step_s, "warm_start_s": warm_s,
            "total_s": warm_s + len(("ppo", "bapo")) * (steps * step_s + eval_s)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=list(gpu_check.SIZES), default="gpu")
    p.add_argument("--us-per-op", type=float, nargs="+", default=[5.0, 10.0, 15.0])
    p.add_argument("--mfu", type=float, default=0.4)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    preset = gpu_check.SIZES[args.size]
    cfg = gpu_check.compose([*gpu_check.COMMON, *preset["overrides"], "device=cpu",
                             "model.autocast=null", "method=bapo"])
    m = measure(cfg)
    s = m["shape"]
    print(f"ESTIMATE (not measured) for --size {args.size} on one H100/H200: "
          f"{s['num_parameters'] / 1e6:.1f}M parameters ({s['n_matmul'] / 1e6:.1f}M in matmuls), "
          f"prompts {m['prompt_len_mean']:.1f} tokens, reference answers "
          f"{m['answer_len_mean']:.1f} tokens (max {m['answer_len_max']}); aten ops counted "
          f"on CPU: {m['ops_decode_step']:.0f} per decode step, {m['ops_score']} per scoring "
          f"forward, {m['ops_train']} per loss forward+backward, {m['ops_adamw']} per AdamW "
          f"step (foreach), {m['ops_sft_step']} per SFT forward+backward; MFU {args.mfu:.0%} "
          f"of {H100_PEAK_TFLOPS} TFLOP/s where FLOP-bound")
    print("\n| us per op | rollout s | behaviour s | updates s | step s | warm start s "
          f"| warm start + 2 x {preset['steps']} steps + evals, s |")
    print("|---|---|---|---|---|---|---|")
    for us in args.us_per_op:
        e = estimate(cfg, m, us, args.mfu, preset["steps"])
        ph = e["phases"]
        print(f"| {us:g} | {ph['rollout']['estimate_s']:.2f} | {ph['behavior']['estimate_s']:.2f} "
              f"| {ph['update']['estimate_s']:.2f} | {e['step_s']:.2f} | {e['warm_start_s']:.0f} "
              f"| {e['total_s']:.0f} |")
    e = estimate(cfg, m, args.us_per_op[0], args.mfu, preset["steps"])
    print("\nFLOP-bound seconds alone (at the MFU above): " + ", ".join(
        f"{k} {v['flops_s']:.3f}" for k, v in e["phases"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
