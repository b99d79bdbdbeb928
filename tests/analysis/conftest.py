"""Synthetic run dirs in the run-dir format (docs/run_dir.md), with known numbers.

`write_run` writes config.yaml, meta.json, status.json, metrics.jsonl and
tokens/step_XXXXXX.parquet, and returns the records and token rows it wrote so tests can
compute what a figure should show independently of the analysis code. The benchmark
(benchmarks/bench_analysis.py) uses the same writer at sweep size.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import pytest  # noqa: E402
import yaml  # noqa: E402

# `analysis` lives at the repo root; plain `pytest` (unlike `python -m pytest`) does not put
# the root on sys.path.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

BAPO_RANGE = {"low_start": 0.6, "low_max": 0.9, "high_start": 1.2, "high_max": 3.0}
TOKEN_TYPES = {
    "step": pa.int32(),
    "update": pa.int16(),
    "response_id": pa.int32(),
    "group_id": pa.int32(),
    "position": pa.int16(),
    "token_id": pa.int32(),
    "logp_behavior": pa.float32(),
    "logp_sampler": pa.float32(),
    "logp": pa.float32(),
    "ratio": pa.float32(),
    "advantage": pa.float32(),
    "entropy": pa.float32(),
    "clip_state": pa.string(),
    "in_loss": pa.bool_(),
    "c_low": pa.float32(),
    "c_high": pa.float32(),
    "reward": pa.float32(),
    "response_length": pa.int16(),
}
RESP_LEN = 8  # tokens per synthetic response
# The step-0 eval of the one synthetic warm start (a real build scores every run the same)
WARM_START_EVAL = {"greedy_accuracy": 0.40, "sampled_accuracy": 0.30}


@dataclass
class SynthRun:
    path: Path
    method: str
    staleness: int
    seed: int
    experiment: str
    steps: list[dict] = field(default_factory=list)  # complete steps only
    updates: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    token_parts: list[pd.DataFrame] = field(default_factory=list)

    @property
    def tokens(self) -> pd.DataFrame:
        return pd.concat(self.token_parts, ignore_index=True)


def method_bounds(method: str) -> tuple[str, float, float]:
    """(objective, c_low, c_high) for the method labels the sweeps use."""
    if method.startswith("bapo"):
        return "bapo", 0.6, 1.2
    if method in ("clip_higher", "top_entropy"):
        return method, 0.8, 1.28
    if method.startswith("clip_") and method.count("_") == 2 and method[5].isdigit():
        lo, hi = method.split("_")[1:]
        return "ppo", float(lo), float(hi)
    return "ppo", 0.8, 1.2


def _tokens(
    rng: np.random.Generator,
    step: int,
    n: int,
    k: int,
    frac: float,
    method: str,
    bounds: tuple[float, float],
) -> pd.DataFrame:
    """One step of token rows: n tokens split over k updates, staler updates drift more."""
    n_resp = max(k, n // RESP_LEN)
    n = n_resp * RESP_LEN
    resp = np.repeat(np.arange(n_resp), RESP_LEN)
    update = np.repeat(np.arange(n_resp) % k, RESP_LEN)
    adv_r = rng.choice([-1.2, -0.6, 0.0, 0.5, 1.5], size=n_resp, p=[0.35, 0.3, 0.1, 0.15, 0.1])
    adv = adv_r[resp]
    logp_b = np.log(rng.uniform(0.02, 1.0, n))
    drift = rng.normal(0.0, 0.25, n) * update  # update j is j updates stale
    logp = np.minimum(logp_b + drift, 0.0)
    ratio = np.exp(logp - logp_b)
    entropy = rng.exponential(1.0 - 0.6 * frac, n)
    c_low, c_high = bounds
    if method.startswith("bapo"):  # bapo moves its bounds per update
        c_low = np.round(0.66 + 0.02 * (update % 4), 2)
        c_high = np.round(1.9 + 0.05 * update, 2)
    c_low = np.broadcast_to(c_low, n).astype(np.float32)
    c_high = np.broadcast_to(c_high, n).astype(np.float32)
    clip = np.where(
        (adv > 0) & (ratio > c_high),
        "clip_high",
        np.where((adv < 0) & (ratio < c_low), "clip_low", "none"),
    )
    in_loss = np.ones(n, bool)
    if method == "top_entropy":
        in_loss = entropy >= np.quantile(entropy, 0.8)
    reward = (adv_r > 0).astype(np.float32)[resp]
    length = np.where(adv < 0, RESP_LEN + 4, RESP_LEN).astype(np.int16)
    return pd.DataFrame(
        {
            "step": np.full(n, step, np.int32),
            "update": update.astype(np.int16),
            "response_id": resp.astype(np.int32),
            "group_id": (resp // 4).astype(np.int32),
            "position": np.tile(np.arange(RESP_LEN), n_resp).astype(np.int16),
            "token_id": rng.integers(0, 512, n).astype(np.int32),
            "logp_behavior": logp_b.astype(np.float32),
            "logp_sampler": (logp_b + rng.normal(0, 0.01, n)).astype(np.float32),
            "logp": logp.astype(np.float32),
            "ratio": ratio.astype(np.float32),
            "advantage": adv.astype(np.float32),
            "entropy": entropy.astype(np.float32),
            "clip_state": clip,
            "in_loss": in_loss,
            "c_low": c_low,
            "c_high": c_high,
            "reward": reward,
            "response_length": length,
        }
    )


def _update_record(
    t: pd.DataFrame, step: int, j: int, k: int, rng: np.random.Generator, bapo: bool = False
) -> dict:
    a, r = t["advantage"].to_numpy(), t["ratio"].to_numpy()
    clipped = t["clip_state"].to_numpy() != "none"
    live = ~clipped
    s_pos = float(np.abs(r * a)[(a > 0) & live].sum())
    s_neg = float(np.abs(r * a)[(a < 0) & live].sum())
    nz = int((a != 0).sum())
    share = s_pos / (s_pos + s_neg) if s_pos + s_neg > 0 else None
    # How a BAPO search ended, by update index: at start, at start, moved, grid max.
    search = {"bapo_steps": (0, 0, 3, 40)[j % 4], "bapo_reached": j % 4 != 3,
              "bapo_undefined": False} if bapo else {}
    return {
        **search,
        "kind": "update",
        "step": step,
        "update": j,
        "global_update": step * k + j,
        "policy_lag": j,
        "loss": float(rng.normal()),
        "grad_norm": float(rng.uniform(0.5, 2.0)),
        "kl_k3": float(rng.uniform(0, 0.01)),
        "c_low": float(t["c_low"].iat[0]),
        "c_high": float(t["c_high"].iat[0]),
        "rho_before": share,
        "rho": share,
        "clip_frac": float(clipped.mean()),
        "clip_low_frac": float((t["clip_state"] == "clip_low").mean()),
        "clip_high_frac": float((t["clip_state"] == "clip_high").mean()),
        "tokens_pos": int((a > 0).sum()),
        "tokens_neg": int((a < 0).sum()),
        "tokens_zero": int((a == 0).sum()),
        "tokens_in_loss": int(t["in_loss"].sum()),
        "token_share_pos": (a > 0).sum() / nz if nz else None,
        "token_share_neg": (a < 0).sum() / nz if nz else None,
        "contrib_grad_pos_share": share,
        "entropy_mean": float(t["entropy"].mean()),
        "skipped": False,
        "skip_reason": None,
        "time_update_s": 0.01,
    }


STEP_MEANS = [
    "clip_frac",
    "clip_low_frac",
    "clip_high_frac",
    "token_share_pos",
    "token_share_neg",
    "contrib_grad_pos_share",
    "c_low",
    "c_high",
    "rho",
    "grad_norm",
    "kl_k3",
]


def _step_record(t: pd.DataFrame, ups: list[dict], step: int, frac: float, rng) -> dict:
    resp = t.drop_duplicates("response_id")
    rec = {
        "kind": "step",
        "step": step,
        "reward_mean": float(0.2 + 0.5 * frac + rng.normal(0, 0.05)),
        "accuracy": float(resp["reward"].mean()),
        "response_length_mean": float(resp["response_length"].mean()),
        "response_length_pos": float(resp.loc[resp["advantage"] > 0, "response_length"].mean()),
        "response_length_neg": float(resp.loc[resp["advantage"] < 0, "response_length"].mean()),
        "entropy_mean": float(t["entropy"].mean()),
    }
    for key in STEP_MEANS:
        vals = [u[key] for u in ups if u.get(key) is not None]
        rec[key] = float(np.mean(vals)) if vals else None
    return rec


def write_run(
    root: Path,
    method: str = "ppo",
    staleness: int = 2,
    seed: int = 0,
    *,
    experiment: str = "sweep",
    steps: int = 4,
    tokens_per_step: int = 64,
    evals_every: int = 2,
    status: str = "finished",
    crash: bool = False,
    write_tokens: bool = True,
    keep: bool = True,
    extra_config: dict | None = None,
    tag: str = "",
) -> SynthRun:
    """Write one run dir the way src/trainer.py does: steps 0..steps-1, an eval at step 0
    and after every `evals_every` completed steps (its `step` counts completed steps).
    `crash` leaves step `steps` half-written (updates, token part, no step record) plus a
    truncated last JSONL line, as a killed trainer would. `extra_config` sets dotted config
    keys (a variant of the run); `tag` adds a dir level so variants do not share a path."""
    objective, c_low, c_high = method_bounds(method)
    path = Path(root) / f"{experiment}_{staleness}x" / method / tag / f"seed{seed}"
    (path / "tokens").mkdir(parents=True, exist_ok=True)
    cfg = {
        "method": {
            "name": method,
            "objective": objective,
            "c_low": c_low,
            "c_high": c_high,
            "bapo": {**BAPO_RANGE, "rho0": 0.4},
        },
        "experiment": {"name": experiment},
        "train": {"staleness": staleness, "steps": steps},
        "seed": seed,
    }
    for dotted, value in (extra_config or {}).items():  # e.g. {"method.bapo.rho0": 0.3}
        node = cfg
        *parents, last = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    (path / "config.yaml").write_text(yaml.safe_dump(cfg))
    meta = {
        "git_commit": "synthetic",
        "versions": {},
        "device": "cpu",
        "method": method,
        "experiment": experiment,
        "staleness": staleness,
        "seed": seed,
    }
    (path / "meta.json").write_text(json.dumps(meta))
    last = steps - 1
    (path / "status.json").write_text(
        json.dumps({"status": status, "error": None, "last_step": last})
    )
    run = SynthRun(path, method, staleness, seed, experiment)
    rng = np.random.default_rng([seed, staleness, sum(map(ord, method))])
    lines = []

    def ev(step: int) -> None:
        greedy, sampled = float(rng.uniform(0.2, 0.6)), float(rng.uniform(0.1, 0.5))
        if step == 0:  # one warm start: every run scores the same before its first update
            greedy, sampled = WARM_START_EVAL["greedy_accuracy"], WARM_START_EVAL["sampled_accuracy"]
        rec = {
            "kind": "eval",
            "step": step,
            "greedy_accuracy": greedy,
            "sampled_accuracy": sampled,
            "n_problems": 50,
        }
        lines.append(rec)
        run.evals.append(rec) if keep else None

    ev(0)
    for step in range(steps + 1 if crash else steps):
        frac = (step + 1) / steps * math.sqrt(staleness) / 2
        t = _tokens(rng, step, tokens_per_step, staleness, min(frac, 1.0), method, (c_low, c_high))
        ups = [
            _update_record(t[t["update"] == j], step, j, staleness, rng, method.startswith("bapo"))
            for j in range(staleness)
        ]
        lines += ups
        if write_tokens:
            table = pa.Table.from_pandas(t, preserve_index=False)
            table = table.cast(pa.schema([(c, TOKEN_TYPES[c]) for c in table.column_names]))
            pq.write_table(table, path / "tokens" / f"step_{step:06d}.parquet")
        if step == steps:  # the crashed step: no step record
            break
        rec = _step_record(t, ups, step, min(frac, 1.0), rng)
        lines.append(rec)
        if keep:
            run.updates += ups
            run.steps.append(rec)
            run.token_parts.append(t)
        done = step + 1
        if done % evals_every == 0 or done == steps:
            ev(done)
    text = "".join(json.dumps(r) + "\n" for r in lines)
    if crash:
        text += '{"kind": "update", "step": ' + str(steps) + ', "upd'
    (path / "metrics.jsonl").write_text(text)
    return run


# Methods x staleness x seeds of the shared synthetic sweep.
SWEEP = [("ppo", k, s) for k in (1, 2, 4) for s in (0, 1)]
SWEEP += [("bapo", k, s) for k in (2, 4) for s in (0, 1)]
SWEEP += [("clip_higher", 2, 0), ("clip_higher", 4, 0), ("top_entropy", 4, 0)]
SWEEP += [(m, 4, s) for m in ("clip_0.8_1.5", "clip_0.5_1.2") for s in (0, 1)]


@pytest.fixture(name="write_run")
def write_run_fixture():
    """The writer as a fixture: `from conftest import` breaks once tests/ has two conftests."""
    return write_run


@pytest.fixture(scope="session")
def sweep(tmp_path_factory) -> tuple[Path, dict[tuple[str, int, int], SynthRun]]:
    root = tmp_path_factory.mktemp("runs")
    runs = {(m, k, s): write_run(root, m, k, s) for m, k, s in SWEEP}
    return root, runs


@pytest.fixture(scope="session")
def runset(sweep):
    from analysis.core.loader import load_runs

    return load_runs([sweep[0]])


@pytest.fixture
def opts(tmp_path):
    from analysis.core import style
    from analysis.figures.contract import Options

    style.setup()
    return Options(out=tmp_path / "figures", formats=("png",), dpi=40)
