"""GPU check: learning first, then timings. Stage 1 reruns the ramble testbed's committed 4x
cell on the device and reads its gain against the committed seeds; stage 2 warm-starts a
locally built model, refuses to time it when the warm start did not learn, and times ppo
and bapo at staleness 4.

    python benchmarks/gpu_check.py --out-dir DIR [--device cuda] [--size gpu|cpu|smoke]

Stage 1 (`--testbed ppo,bapo`, the gpu size's default): `experiment=ramble_4x`, seed 0, its
shipped warm start, everything as committed but the device (benchmarks/gpu_check_gates.py
says what is compared and how). Stage 2's gate: the warm start's greedy accuracy and the
share of its responses that end must reach the size's floor (`WARM_START_FLOORS`), or the
check writes its JSON with status "refused" and exits 1 before any RL run.

`benchmarks/gpu_check.sh` is the entry point (offline install, CUDA-marked tests, then
this). Nothing is downloaded: the model is the tiny family scaled up (`--size gpu`: 8
layers x 896, about 78M parameters), its tokenizer is trained and its warm start (SFT on
worked solutions) runs here, on the run's device, under bf16 autocast with fp32 weights.
The task is the harder chain-sum mix (2-8 terms of up to two digits), so reference
answers run to 88 tokens (mean 47). Rollouts use HF generate on the trainer's own model (KV cache on the same
device); vLLM only with `--rollout vllm`, or `auto` when it imports.

Each method runs as the trainer runs it (same Trainer, RunWriter, evaluator); the
per-step timings come from the run dir's metrics.jsonl, not from a second clock. Written
to DIR/gpu_check.json, for every step: time_rollout_s, time_behavior_s, time_update_s,
tokens_per_s (response tokens per rollout second), peak GPU memory, FLOPs and MFU
(formula and peaks in benchmarks/gpu_sizing.py), and per run a metric summary; the sizing
table for docs/gpu.md goes to DIR/sizing_table.md and stdout.

`--budget-s` bounds the RL runs' wall time (split evenly between the methods): a run
that would overrun its share stops before its next step and says so in the JSON.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

# On a shared CPU, OpenMP's default busy-wait makes 2-thread torch ops many times slower
# whenever another process holds a core (benchmarks/bench_objectives.py); set before torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import _setup  # noqa: E402, F401 - this checkout first on sys.path

from src.pinning import pin_process  # noqa: E402

if __name__ == "__main__":
    pin_process()  # the numerics, before torch loads (src/pinning.py)

import gpu_check_gates  # noqa: E402
import gpu_sizing  # noqa: E402
import torch  # noqa: E402

# Shared by every size: staleness 4, the harder chain-sum mix, evals at the start and end.
COMMON = [
    "experiment=staleness_4x", "task.params.min_terms=2", "task.params.max_digits=2",
    "logger.progress=false", "logger.token_fraction=0.125", "eval.sampled=false",
]
SIZES: dict[str, dict] = {
    # ~78M parameters, 64 prompts x 8 samples of 2-8 terms of up to two digits (reference
    # answers up to 88 tokens, mean 47). Warm start: 1500 SFT steps of 64 problems.
    "gpu": {"steps": 20, "budget_s": 420, "overrides": [
        "model.autocast=bfloat16", "task.params.max_terms=8",
        "model.architecture.hidden_size=896", "model.architecture.num_layers=8",
        "model.architecture.num_heads=14", "model.architecture.max_position_embeddings=256",
        "model.sft.steps=1500", "model.sft.batch_size=64", "model.sft.lr=5e-4",
        "model.sft.warmup_steps=100", "model.sft.pack_len=256", "model.sft.eval_problems=256",
        "model.sft.max_new_tokens=128", "rollout.max_new_tokens=128",
        "train.prompts_per_step=64", "train.group_size=8", "train.optimizer=adamw", "train.lr=1e-5",
        "train.threads=8",
        "task.eval_problems=128"]},
    # The same script at tiny sizes: the CPU dry run (a few minutes on 2 cores).
    # One-digit 2-term sums (the tests' tiny warm start, ~35% accuracy), so groups mix.
    "cpu": {"steps": 4, "budget_s": 600, "overrides": [
        "task.params.max_terms=2", "task.params.max_digits=1",
        "model.architecture.hidden_size=64", "model.architecture.num_layers=2",
        "model.architecture.num_heads=2", "model.architecture.tokenizer_corpus=2000",
        "model.sft.steps=150", "model.sft.batch_size=32", "model.sft.lr=5e-3",
        "model.sft.pack_len=0", "model.sft.eval_problems=32", "model.sft.eval_samples=1",
        "model.sft.max_new_tokens=32", "rollout.max_new_tokens=32",
        "train.prompts_per_step=8", "train.group_size=4", "train.threads=1",
        "train.optimizer=adamw", "train.lr=5e-5",  # the GPU profile's optimizer
        "task.eval_problems=16"]},
    # Seconds: what the test runs.
    "smoke": {"steps": 2, "budget_s": None, "overrides": [
        "task.params.max_terms=2", "model.architecture.hidden_size=32",
        "model.architecture.num_layers=1", "model.architecture.num_heads=2",
        "model.architecture.tokenizer_corpus=300", "model.sft.steps=8",
        "model.sft.batch_size=8", "model.sft.eval_problems=4", "model.sft.eval_samples=1",
        "model.sft.max_new_tokens=16", "model.sft.pack_len=0", "rollout.max_new_tokens=16",
        "train.prompts_per_step=4", "train.group_size=2", "train.threads=1",
        "train.optimizer=adamw", "train.lr=5e-5",
        "task.eval_problems=4"]},
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    p.add_argument("--size", choices=["auto", *SIZES], default="auto",
                   help="auto: gpu on CUDA, cpu otherwise")
    p.add_argument("--methods", default="ppo,bapo")
    p.add_argument("--steps", type=int, default=None, help="trainer steps per method")
    p.add_argument("--budget-s", type=float, default=None,
                   help="wall-time bound of all RL runs together (default: the size's)")
    p.add_argument("--rollout", choices=["auto", "hf", "vllm"], default="hf",
                   help="auto: vllm when it imports (and the device is CUDA), else hf")
    p.add_argument("--peak-tflops", type=float,
                   default=float(os.environ["PEAK_TFLOPS"]) if os.environ.get("PEAK_TFLOPS") else None,
                   help="the GPU's dense bf16 peak (default: from the device name)")
    p.add_argument("--testbed", default=None,
                   help="stage 1's methods, comma-separated, or none (default: ppo,bapo on the "
                        "gpu size, none on the others)")
    p.add_argument("--testbed-override", action="append", default=[], metavar="KEY=VALUE",
                   help="a Hydra override for stage 1 only (repeatable); the run is then "
                        "reported beside the committed interval, not judged by it")
    p.add_argument("--min-greedy-accuracy", type=float, default=None,
                   help="the warm start's floor (default: the size's, WARM_START_FLOORS)")
    p.add_argument("--min-finished-fraction", type=float, default=None,
                   help="the floor of the share of warm-start responses that end")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="warm-start cache (default: OUT_DIR/cache, so the warm start is timed)")
    p.add_argument("overrides", nargs="*", help="more Hydra overrides, e.g. train.lr=2e-5")
    return p.parse_args(argv)


def compose(overrides: list[str]):
    from src.build import compose_config

    return compose_config(overrides)


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def kv_cache_device(model, tokenizer, prompt: str) -> str:
    """Where HF generate keeps its KV cache for this model: one 2-token generation."""
    enc = tokenizer([prompt], return_tensors="pt").to(next(model.parameters()).device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=2, do_sample=False,
                                 return_dict_in_generate=True,
                                 pad_token_id=tokenizer.pad_token_id)
    finally:
        model.train(was_training)
    cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
    layers = getattr(cache, "layers", None)
    if layers:
        return str(layers[0].keys.device)
    try:
        return str(cache[0][0].device)
    except (TypeError, IndexError, KeyError):
        return "unknown"


def prompt_tokens_per_step(cfg, task, tokenizer, start: int, steps: int) -> list[int]:
    """Real prompt tokens of each step's rollout, tokenized as the rollout does (x G)."""
    from src.build import prompt_formatter
    from src.rollout.base import needs_special_tokens

    fmt = prompt_formatter(cfg.model, tokenizer)
    per = cfg.train.prompts_per_step
    counts = []
    for s in range(steps):
        prompts = [fmt(task.problem(start + s * per + i).prompt) for i in range(per)]
        ids = tokenizer(prompts, add_special_tokens=needs_special_tokens(tokenizer, prompts))
        counts.append(sum(len(x) for x in ids["input_ids"]) * cfg.train.group_size)
    return counts


class Deadline(Exception):
    pass


def run_method(cfg, task, device: torch.device, run_dir: Path, budget_s: float | None,
               model_path: str | None) -> dict:
    """One method's run; returns its raw records and what only this process can see."""
    from src.build import attach_trainer, build_parts
    from src.config import to_container
    from src.telemetry import RunWriter

    # vLLM loads the warm-start entry, a save_pretrained dir (model_path)
    parts = build_parts(cfg, device=device, progress=False, task=task, model_path=model_path)
    info = parts.info
    writer = RunWriter(run_dir, to_container(cfg), {"check": "gpu_check", "device": str(device),
                                                     "warm_start": info.get("path")})
    # The evals are run and timed here (evaluate="caller"), not by the trainer.
    trainer = attach_trainer(parts, writer, run_dir / "checkpoints", evaluate="caller")
    backend, evaluate, tokenizer = parts.backend, parts.evaluate, parts.tokenizer
    state = parts.fresh_state()
    memory, eval_s, stopped, t_run = {}, [], None, time.perf_counter()
    try:
        t0 = time.perf_counter()
        writer.log_eval(evaluate(0))
        eval_s.append(time.perf_counter() - t0)
        for step in range(cfg.train.steps):
            elapsed = time.perf_counter() - t_run
            per_step = elapsed / step if step else 0.0
            if budget_s is not None and step and elapsed + per_step > budget_s:
                raise Deadline(f"stopped before step {step}: {elapsed:.0f}s spent, a step takes "
                               f"about {per_step:.0f}s, the run's share is {budget_s:.0f}s")
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            trainer.train_step(state)
            _synchronize(device)
            state.step += 1
            if device.type == "cuda":
                memory[step] = {
                    "peak_memory_allocated_gib": torch.cuda.max_memory_allocated(device) / 2**30,
                    "peak_memory_reserved_gib": torch.cuda.max_memory_reserved(device) / 2**30}
    except Deadline as e:
        stopped = str(e)
        print(f"  {cfg.method.name}: {stopped}", flush=True)
    t0 = time.perf_counter()
    writer.log_eval(evaluate(state.step))
    eval_s.append(time.perf_counter() - t0)
    writer.set_status("finished" if stopped is None else "stopped", error=stopped)
    writer.close()
    backend.close()
    return {"memory": memory, "eval_s": eval_s, "stopped_early": stopped,
            "start_index": int(info.get("next_train_index", 0)), "tokenizer": tokenizer,
            "rl_wall_s": time.perf_counter() - t_run,
            "backend_stats": getattr(backend, "stats", None)}


def run_testbed(methods: list[str], device: torch.device, out: Path, cache: Path,
                extra: list[str]) -> dict:
    """Stage 1: each method's run of the committed ramble 4x cell on `device` (a whole run,
    as `python -m src.run` makes it), its gain against the committed seeds, its step times."""
    from src.run import execute

    results = {}
    for m in methods:
        run_dir = out / "testbed" / m
        overrides = [f"experiment={gpu_check_gates.TESTBED_EXPERIMENT}", f"method={m}", "seed=0",
                     f"device={device}", "train.threads=1", f"cache_dir={cache}",
                     "logger.progress=false", *extra]
        t0 = time.perf_counter()
        status = execute(compose(overrides), run_dir, overrides)
        _synchronize(device)
        records, evals = read_run(run_dir)
        comparison = gpu_check_gates.testbed_comparison(m, run_dir)
        results[m] = {"run_dir": str(run_dir), "status": status, "overrides": overrides,
                      "wall_s": time.perf_counter() - t0, "comparison": comparison,
                      "summary": gpu_sizing.summarize_steps(records, evals)}
        g = comparison["gain_sampled_acc"]
        print(f"stage 1, {m}: sampled gain {g['run']:+.3f} against the committed "
              f"{g['committed_mean']:+.3f} (95% prediction interval of one seed "
              f"{g['prediction_low']:+.3f} .. {g['prediction_high']:+.3f}, n={g['n']}): "
              f"{comparison['verdict']}; {results[m]['wall_s']:.0f}s", flush=True)
    return results


def read_run(run_dir: Path) -> tuple[list[dict], list[dict]]:
    from analysis.core.loader import read_metrics

    records, _ = read_metrics(run_dir)
    return ([r for r in records if r.get("kind") == "step"],
            [r for r in records if r.get("kind") == "eval"])


STEP_KEYS = ("step", "time_rollout_s", "time_behavior_s", "time_update_s", "time_telemetry_s",
             "time_step_s", "reward_mean", "accuracy", "response_length_mean", "entropy_mean",
             "sampler_logp_gap", "clip_frac", "c_low", "c_high", "grad_norm",
             "degenerate_groups", "skipped_updates")


def step_rows(records: list[dict], prompt_tokens: list[int], memory: dict, shape: dict,
              batch: int, epochs: int, peak: float | None) -> list[dict]:
    rows = []
    for rec in records:
        step = int(rec["step"])
        response_tokens = float(rec["response_length_mean"]) * batch
        flops = gpu_sizing.step_flops(shape["n_matmul"], shape["layers"], shape["hidden"],
                                      prompt_tokens=prompt_tokens[step],
                                      response_tokens=response_tokens, sequences=batch,
                                      epochs=epochs)
        busy = rec["time_rollout_s"] + rec["time_behavior_s"] + rec["time_update_s"]
        row = {k: rec.get(k) for k in STEP_KEYS}
        row.update(
            prompt_tokens=prompt_tokens[step], response_tokens=response_tokens,
            tokens_per_s=response_tokens / rec["time_rollout_s"],
            peak_memory_allocated_gib=memory.get(step, {}).get("peak_memory_allocated_gib"),
            peak_memory_reserved_gib=memory.get(step, {}).get("peak_memory_reserved_gib"),
            flops_rollout=flops["rollout"], flops_behavior=flops["behavior"],
            flops_update=flops["update"],
            mfu_rollout=gpu_sizing.mfu(flops["rollout"], rec["time_rollout_s"], peak),
            mfu_behavior=gpu_sizing.mfu(flops["behavior"], rec["time_behavior_s"], peak),
            mfu_update=gpu_sizing.mfu(flops["update"], rec["time_update_s"], peak),
            mfu_step=gpu_sizing.mfu(sum(flops.values()), busy, peak))
        rows.append(row)
    return rows


def model_shape(model) -> dict:
    from src.models.tiny import num_parameters

    n_matmul = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    return {"num_parameters": num_parameters(model), "n_matmul": n_matmul,
            "layers": model.config.num_hidden_layers, "hidden": model.config.hidden_size,
            "vocab": model.config.vocab_size, "dtype": str(next(model.parameters()).dtype)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t_start = time.perf_counter()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars for every cache load
    from src.build import build_model, build_task
    from src.device import pick_device

    device = pick_device(args.device)
    size = args.size if args.size != "auto" else ("gpu" if device.type == "cuda" else "cpu")
    preset = SIZES[size]
    steps = args.steps or preset["steps"]
    budget = args.budget_s if args.budget_s is not None else preset["budget_s"]
    methods = [m for m in args.methods.split(",") if m]
    rollout = args.rollout
    if rollout == "auto":
        rollout = "vllm" if device.type == "cuda" and importlib.util.find_spec("vllm") else "hf"
    out = args.out_dir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    cache = (args.cache_dir or out / "cache").resolve()
    overrides = [*COMMON, *preset["overrides"], f"device={device}", f"train.steps={steps}",
                 f"eval.every={steps}", f"checkpoint.every={steps}", f"cache_dir={cache}",
                 f"rollout={rollout}", *args.overrides]
    if rollout == "vllm":
        overrides += ["rollout.params.dtype=bfloat16", "rollout.params.enable_sleep_mode=false",
                      "rollout.params.gpu_memory_utilization=0.2"]
    cfgs = {m: compose([*overrides, f"method={m}"]) for m in methods}  # config errors first
    first = cfgs[methods[0]]
    torch.set_num_threads(first.train.threads)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    peak, peak_source = gpu_sizing.peak_bf16_tflops(name, args.peak_tflops)
    env = {"device": str(device), "device_name": name or "cpu", "torch": torch.__version__,
           "cuda": torch.version.cuda, "transformers": _version("transformers"),
           "vllm": _version("vllm"), "python": sys.version.split()[0], "rollout": rollout}
    print(f"== gpu_check: size {size}, {', '.join(methods)} x {steps} steps, {env}", flush=True)

    testbed_methods = (args.testbed if args.testbed is not None
                       else "ppo,bapo" if size == "gpu" else "none")
    testbed_methods = [m for m in testbed_methods.split(",") if m and m != "none"]
    testbed = run_testbed(testbed_methods, device, out, cache, args.testbed_override)

    task = build_task(first.task)
    t0 = time.perf_counter()
    model, tokenizer, info = build_model(first.model, task, device, progress=False,
                                         cache_dir=first.cache_dir, numerics=first.numerics)
    _synchronize(device)
    warm = {"seconds": time.perf_counter() - t0, "cache_hit": info.get("cache_hit"),
            **{k: info.get(k) for k in ("sft_seconds", "eval_seconds", "sft_loss_final",
                                        "greedy_accuracy", "sampled_accuracy",
                                        "finished_fraction", "response_length", "runtime")}}
    shape = model_shape(model)
    kv_device = kv_cache_device(model, tokenizer, task.problem(0).prompt)
    print(f"warm start {warm['seconds']:.1f}s (SFT {_num(warm['sft_seconds'])}s), "
          f"{shape['num_parameters'] / 1e6:.1f}M parameters, greedy accuracy "
          f"{_num(warm['greedy_accuracy'], '.3f')}, KV cache on {kv_device}", flush=True)
    del model
    floor = dict(gpu_check_gates.WARM_START_FLOORS[size])
    if args.min_greedy_accuracy is not None:
        floor["greedy_accuracy"] = args.min_greedy_accuracy
    if args.min_finished_fraction is not None:
        floor["finished_fraction"] = args.min_finished_fraction
    under = gpu_check_gates.warm_start_gate(warm, floor)
    common = {"size": size, "methods": methods, "steps_per_method": steps, "budget_s": budget,
              "env": env, "overrides": overrides, "model": shape, "warm_start": warm,
              "warm_start_floor": floor, "testbed": testbed, "kv_cache_device": kv_device}
    if under:
        result = {"status": "refused", "ok": False, "refused_because": under, **common,
                  "total_s": time.perf_counter() - t_start}
        (out / "gpu_check.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
        print("REFUSED: no timings of a model that did not learn: " + "; ".join(under) +
              f"; {out / 'gpu_check.json'}", flush=True)
        return 1

    batch = first.train.prompts_per_step * first.train.group_size
    runs = {}
    for m in methods:
        cfg = cfgs[m]
        run_dir = out / "runs" / m
        share = None  # this run's part of what is left of the RL budget
        if budget is not None:
            spent = time.perf_counter() - t_start - warm["seconds"]
            share = max(budget - spent, 0.0) / (len(methods) - len(runs))
        raw = run_method(cfg, task, device, run_dir, share, info.get("path"))
        records, evals = read_run(run_dir)
        prompts = prompt_tokens_per_step(cfg, task, raw["tokenizer"], raw["start_index"],
                                         len(records))
        rows = step_rows(records, prompts, raw["memory"], shape, batch, cfg.train.epochs, peak)
        runs[m] = {"run_dir": str(run_dir), "stopped_early": raw["stopped_early"],
                   "rl_wall_s": raw["rl_wall_s"], "eval_s": raw["eval_s"],
                   "backend_stats": raw["backend_stats"], "steps": rows, "evals": evals,
                   "summary": gpu_sizing.summarize_steps(rows, evals)}
        s = runs[m]["summary"]
        print(f"{m}: {s['steps']} steps, step {_num(s['time_step_s_mean'], '.2f')}s (rollout "
              f"{_num(s['time_rollout_s_mean'], '.2f')}s, updates {_num(s['time_update_s_mean'], '.2f')}s), "
              f"{_num(s['tokens_per_s_mean'], ',.0f')} tok/s, reward {_num(s['reward_first'], '.3f')}"
              f" -> {_num(s['reward_last'], '.3f')}, greedy accuracy {s['eval_greedy_accuracy']}, "
              f"sampler_logp_gap {_num(s['sampler_logp_gap_mean'], '.2e')}",
              flush=True)

    measured = device.type == "cuda"
    label = (f"MEASURED on {name}" if measured else
             f"CPU DRY RUN ({size} size; not GPU numbers)")
    table = gpu_sizing.sizing_table(runs, batch=batch, params=shape["num_parameters"], label=label)
    ok = all(r["summary"]["steps"] > 0 for r in runs.values()) and (
        not measured or kv_device.startswith("cuda"))
    result = {
        "status": "measured" if measured else "dry run", "ok": ok, **common, "batch": batch,
        "peak_bf16_tflops": peak, "peak_source": peak_source,
        "flops_formula": gpu_sizing.FLOPS_FORMULA,
        "runs": runs, "sizing_table_md": table, "total_s": time.perf_counter() - t_start,
    }
    (out / "gpu_check.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    (out / "sizing_table.md").write_text(table)
    print(table)
    print(f"{'OK' if ok else 'FAILED'}: total {result['total_s']:.0f}s; {out / 'gpu_check.json'}",
          flush=True)
    return 0 if ok else 1


def _num(value, spec: str = ".1f") -> str:
    return "n/a" if value is None else format(value, spec)


if __name__ == "__main__":
    sys.exit(main())
