"""FLOPs, MFU and the sizing table of `benchmarks/gpu_check.py` (pure functions, no torch).

Model FLOPs (PaLM's accounting, Chowdhery et al. 2022, appendix B), per token of a
sequence of S tokens:
    forward  = 2 * N_matmul + 4 * L * d * S
    training = 3 * forward  (forward + backward)
where N_matmul is the number of weights in the model's linear layers (the LM head
included, the embedding lookup not), L the number of layers and d the hidden size. Only
real tokens count (prompt + response, no padding, no tokens generated after a response's
EOS while the rest of the batch finishes), so MFU is the useful share of the GPU's peak.
A trainer step costs
    rollout   = forward FLOPs of every prompt and response token (prefill + KV-cached decode)
    behaviour = forward FLOPs of the same tokens (no grad)
    updates   = training FLOPs of the same tokens, once per epoch
MFU = FLOPs / (seconds * peak), peak = the GPU's dense bf16 tensor-core peak from the
vendor's datasheet (no sparsity), or $PEAK_TFLOPS.
"""

from __future__ import annotations

import math
import statistics

FLOPS_FORMULA = __doc__.split("\n\n")[1]  # the paragraph above, into gpu_check.json

# Dense bf16 tensor-core peaks in TFLOP/s from NVIDIA's datasheets (the sparsity figures
# are twice these). Matched against torch.cuda.get_device_name(); first match wins.
PEAK_BF16_TFLOPS: list[tuple[tuple[str, ...], float, str]] = [
    (("H200", "NVL"), 835.0, "H200 NVL"),
    (("H200",), 989.4, "H200 SXM"),
    (("H100", "NVL"), 835.0, "H100 NVL"),
    (("H100", "PCIE"), 756.0, "H100 PCIe"),
    (("H100",), 989.4, "H100 SXM"),
    (("GH200",), 989.4, "GH200"),
    (("B200",), 2250.0, "B200"),
    (("A100",), 312.0, "A100"),
    (("L40S",), 362.1, "L40S"),
    (("L4",), 121.0, "L4"),
    (("A10",), 125.0, "A10"),
]


def peak_bf16_tflops(device_name: str | None, override: float | None = None
                     ) -> tuple[float | None, str]:
    """(peak TFLOP/s, where it came from); (None, why) when unknown."""
    if override is not None:
        return float(override), "PEAK_TFLOPS override"
    if not device_name:
        return None, "no GPU (set PEAK_TFLOPS to compute an MFU anyway)"
    upper = device_name.upper()
    for words, tflops, label in PEAK_BF16_TFLOPS:
        if all(w in upper for w in words):
            return tflops, f"{label} datasheet, dense bf16"
    return None, f"unknown GPU {device_name!r} (set PEAK_TFLOPS)"


def forward_flops(n_matmul: int, n_layers: int, hidden: int, tokens: float, seq_len: float) -> float:
    """Forward FLOPs of `tokens` tokens in sequences of mean length `seq_len`."""
    return tokens * (2.0 * n_matmul + 4.0 * n_layers * hidden * seq_len)


def step_flops(n_matmul: int, n_layers: int, hidden: int, *, prompt_tokens: float,
               response_tokens: float, sequences: int, epochs: int = 1) -> dict[str, float]:
    """FLOPs of one trainer step's three phases (module docstring)."""
    tokens = prompt_tokens + response_tokens
    fwd = forward_flops(n_matmul, n_layers, hidden, tokens, tokens / max(sequences, 1))
    return {"rollout": fwd, "behavior": fwd, "update": 3.0 * fwd * epochs}


def mfu(flops: float, seconds: float | None, peak_tflops: float | None) -> float | None:
    if peak_tflops is None or not seconds or seconds <= 0:
        return None
    return flops / (seconds * peak_tflops * 1e12)


def _finite(values) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def mean(values) -> float | None:
    vals = _finite(values)
    return statistics.fmean(vals) if vals else None


def summarize_steps(steps: list[dict], evals: list[dict]) -> dict:
    """A run's metric summary from its per-step records (and eval records)."""
    def col(key):
        return [s.get(key) for s in steps]

    def first_last(key):
        vals = _finite(col(key))
        return (vals[0], vals[-1]) if vals else (None, None)

    reward_first, reward_last = first_last("reward_mean")
    entropy_first, entropy_last = first_last("entropy_mean")
    gaps = _finite(col("sampler_logp_gap"))
    greedy = [(e["step"], e.get("greedy_accuracy")) for e in evals if "greedy_accuracy" in e]
    return {
        "steps": len(steps),
        "reward_mean": mean(col("reward_mean")), "reward_first": reward_first,
        "reward_last": reward_last, "accuracy_mean": mean(col("accuracy")),
        "response_length_mean": mean(col("response_length_mean")),
        "entropy_first": entropy_first, "entropy_last": entropy_last,
        "clip_frac_mean": mean(col("clip_frac")), "c_low_mean": mean(col("c_low")),
        "c_high_mean": mean(col("c_high")), "grad_norm_mean": mean(col("grad_norm")),
        "sampler_logp_gap_mean": mean(gaps), "sampler_logp_gap_max": max(gaps, default=None),
        "degenerate_groups": sum(int(s.get("degenerate_groups") or 0) for s in steps),
        "skipped_updates": sum(int(s.get("skipped_updates") or 0) for s in steps),
        "eval_greedy_accuracy": dict(greedy),
        "time_rollout_s_mean": mean(col("time_rollout_s")),
        "time_behavior_s_mean": mean(col("time_behavior_s")),
        "time_update_s_mean": mean(col("time_update_s")),
        "time_step_s_mean": mean(col("time_step_s")),
        "tokens_per_s_mean": mean(col("tokens_per_s")),
        "mfu_rollout_mean": mean(col("mfu_rollout")), "mfu_update_mean": mean(col("mfu_update")),
        "mfu_step_mean": mean(col("mfu_step")),
        "peak_memory_allocated_gib_max": max(_finite(col("peak_memory_allocated_gib")), default=None),
    }


def _fmt(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def sizing_table(runs: dict[str, dict], *, batch: int, params: int, label: str) -> str:
    """The markdown table GPU.md takes, one row per run, from the runs' summaries."""
    lines = [
        f"{label}: {params / 1e6:.1f}M parameters, {batch} responses per step "
        "(means over the measured steps; MFU against the dense bf16 peak)",
        "",
        "| method | steps | mean response length | rollout s | behaviour s | updates s | step s "
        "| rollout tok/s | MFU rollout | MFU updates | MFU step | peak GiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, run in runs.items():
        s = run["summary"]
        lines.append(
            f"| {name} | {s['steps']} | {_fmt(s['response_length_mean'], '.1f')} "
            f"| {_fmt(s['time_rollout_s_mean'], '.2f')} | {_fmt(s['time_behavior_s_mean'], '.2f')} "
            f"| {_fmt(s['time_update_s_mean'], '.2f')} | {_fmt(s['time_step_s_mean'], '.2f')} "
            f"| {_fmt(s['tokens_per_s_mean'], ',.0f')} | {_fmt(s['mfu_rollout_mean'], '.2%')} "
            f"| {_fmt(s['mfu_update_mean'], '.2%')} | {_fmt(s['mfu_step_mean'], '.2%')} "
            f"| {_fmt(s['peak_memory_allocated_gib_max'], '.2f')} |")
    return "\n".join(lines) + "\n"
