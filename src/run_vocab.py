"""The run-dir vocabulary: the names a run dir is written in and read by, defined once.

The writer (src/trainer.py, src/records.py), the TRL plug and analysis/ all import these,
so a run dir means the same to all of them. Plain Python only: no torch and no Hydra
(a test checks), so analysis/ can read run dirs without either.

- clip states: what a method did to a token's gradient, in the order of their int8 codes;
- the step record's keys derived from them (every state's share is averaged per step);
- the keys that change no number, and config sections added after runs were committed;
- the legacy `method:` layout and how to read it as today's;
- a method's traits, the part of it that analysis reads (written as `method.traits`);
- meta.json, as every engine writes it.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ClipState:
    name: str  # as stored in the token files' clip_state column
    carries_gradient: bool  # whether the token keeps a gradient (changed or not) in this state
    fraction: str | None  # the update/step record key of the state's share of loss tokens


# One line per state; its code is its position, so a new state is appended, never inserted:
# token files of earlier runs store the names, but the int8 codes of the trainer and the
# token viewer follow this order. See src/algorithms/surrogate.py for which method sets which
# state.
CLIP_STATES = (
    ClipState("none", carries_gradient=True, fraction=None),
    ClipState("clip_low", carries_gradient=False, fraction="clip_low_frac"),
    ClipState("clip_high", carries_gradient=False, fraction="clip_high_frac"),
    ClipState("dual", carries_gradient=False, fraction="dual_clip_frac"),
    ClipState("masked", carries_gradient=False, fraction="masked_frac"),
    ClipState("trunc_low", carries_gradient=True, fraction="trunc_low_frac"),
    ClipState("trunc_high", carries_gradient=True, fraction="trunc_high_frac"),
    ClipState("kl_penalty", carries_gradient=True, fraction="kl_penalty_frac"),
    # the 2025-26 clip family (sapo, gppo, aspo); appended, so older codes keep their place
    ClipState("gated", carries_gradient=True, fraction="gated_frac"),
    ClipState("preserved_low", carries_gradient=True, fraction="preserved_low_frac"),
    ClipState("preserved_high", carries_gradient=True, fraction="preserved_high_frac"),
    ClipState("dual_capped", carries_gradient=True, fraction="dual_capped_frac"),
)
CLIP_STATE_NAMES = tuple(s.name for s in CLIP_STATES)
NO_GRADIENT_STATES = tuple(s.name for s in CLIP_STATES if not s.carries_gradient)
# The share of loss-bearing tokens in each state that has a fraction: key -> state code.
STATE_FRACTIONS = {s.fraction: code for code, s in enumerate(CLIP_STATES) if s.fraction}

# Step records: means over a step's (not skipped) updates.
STEP_MEAN_KEYS = ("clip_frac", *STATE_FRACTIONS,  # every state's share, so none is left out
                  "clip_frac_pos", "clip_frac_neg", "token_share_pos", "token_share_neg",
                  "contrib_grad_pos_share", "contrib_value_pos_share", "c_low", "c_high", "rho",
                  "grad_norm", "kl_k3", "entropy_clip_cov", "abs_log_ratio_mean", "kl_k1",
                  "m2_harmful", "m2_harmful_after", "m2po_tau",
                  "sapo_gate_pos", "sapo_gate_neg", "sapo_grad_pos_share", "dppo_divergence", "dcpo_c_low_neg",
                  "dcpo_c_high_pos", "aspo_high_entropy_frac",
                  "grad_clipped", "policy_lag", "behav_abs_log_ratio_mean", "behav_kl_k1",
                  "behav_kl_k3", "behav_m2", "behav_ess", "behav_weight_mean",
                  "behav_weight_capped_frac", "version_span_mean",
                  # the sampler-trainer mismatch and its correction (src/corrections/)
                  "rollout_corr_kl", "rollout_corr_k3_kl", "rollout_corr_chi2_token",
                  "rollout_corr_chi2_seq", "rollout_corr_log_ppl_diff", "rollout_corr_ppl_ratio",
                  "rollout_corr_rollout_is_mean", "rollout_corr_rollout_is_eff_sample_size",
                  "rollout_corr_rollout_is_ratio_fraction_high",
                  "rollout_corr_rollout_is_masked_fraction", "rollout_corr_rollout_rs_masked_fraction")
# A model path (model.path, and meta.json's `warm_start`) naming a model file an installed
# package ships (src/models/packaged.py): RL starts from its published weights, no SFT.
PACKAGE_PREFIX = "package:"

# Summed over a step's updates (per-bin counts) and the step's maximum.
STEP_SUM_LIST_KEYS = ("ratio_hist_pos", "ratio_hist_neg")
# The bins of ratio_hist_pos/neg: (<=0.2], (0.2, 0.5], ..., (1.2, 1.5], (1.5, 2], (2, inf).
RATIO_BIN_EDGES = (0.2, 0.5, 0.8, 1.0, 1.2, 1.5, 2.0)
STEP_MAX_KEYS = ("policy_lag_max", "behav_weight_max", "version_span_max")

# Config keys (and everything under them) that change no number a run computes: where it
# runs from, how it is displayed and logged, and what it keeps on disk. The run-dir tag
# (Hydra's exclude_keys, src/run_dir.py), the config comparison and analysis's cells all
# ignore them.
NON_NUMERIC_KEYS = (
    "resume",
    "overwrite",
    "cache_dir",
    "experiment.description",
    "model.install",  # the install hint a config error shows
    "model.gguf_cache",  # where the same weights are read from (src/models/gguf_cache.py)
    "logger.backend",
    "logger.project",
    "logger.mode",
    "logger.progress",
    "checkpoint.every",
    "checkpoint.keep",
    "checkpoint.keep_final",
    "method.traits",  # derived from method.objective (MethodTraits below)
)
# Sections added to config.yaml after runs were committed, with the values those runs
# used: a config.yaml without the section, or whose section lacks one of these keys, was
# made with these. `offpolicy` holds today's defaults but for `DEFAULTS_CHANGED_SINCE` (a
# test keeps the rest equal to src/config.py's); `numerics` does not: runs made before the
# mode existed pinned nothing, i.e. ran native, while today's default is portable.
ADDED_SECTIONS = {
    "offpolicy": {"source": "fresh", "anchor": "coupled", "weight_cap": 2.0, "weight_rule": "clamp",
                  "delay": None, "delay_start": None, "replay_capacity": None, "replay_draws": None,
                  "token_budget": None, "mask_stale_prefix": None},
    "numerics": "native",
    "train": {"minibatch_split": "responses", "fused_optimizer": False, "compile": "none",
              "shared_prefix": False, "pack": None},
    # The mismatch work: the sampler in the trainer's own fp32 weights, evals at T = 1 (the
    # only temperature runs could use before), no correction.
    "rollout": {"precision": "fp32", "behaviour": "scored"},
    "eval": {"temperature": 1.0, "at": None, "final_problems": None},
    # the warm start's SFT without label smoothing (every shipped build); the pretrained
    # model's keys (no GGUF file, every weight trained)
    "model": {"sft": {"label_smoothing": 0.0}, "gguf_file": None, "install": None,
              "freeze_embeddings": False, "freeze_layers": 0, "lora_r": 0, "lora_alpha": 16.0,
              "lora_targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                               "down_proj"]},
    "correction": {"name": "none", "rollout_is": None, "rollout_is_threshold": 2.0,
                   "rollout_is_batch_normalize": False, "rollout_rs": None,
                   "rollout_rs_threshold": None, "bypass_mode": False},
}
# Keys of ADDED_SECTIONS whose default moved after runs were committed: the decoupled
# objective clamped its behaviour weight at verl's 2.0 and now masks above AReaL's 5.0.
DEFAULTS_CHANGED_SINCE = ("offpolicy.weight_cap", "offpolicy.weight_rule")
# Keys that change the numbers only under one value of another key: the behaviour weight's
# cap and rule exist under the decoupled anchor only. Under any other value they change no
# number, so the config comparison and analysis's cells leave them out there (a coupled run
# made before the cap's default moved is the same run as one made after).
ONLY_UNDER = {"offpolicy.weight_cap": ("offpolicy.anchor", "decoupled"),
              "offpolicy.weight_rule": ("offpolicy.anchor", "decoupled")}
# Before each method owned its parameters, config.yaml kept them flat under `method:`
# (method.c_low, method.q, method.entropy_scope, method.bapo.*). Old layout -> the
# objective's section, per objective.
LEGACY_METHOD_PARAMS = {
    "ppo": {"c_low": "c_low", "c_high": "c_high", "dual_clip_c": "dual_clip_c"},
    "clip_higher": {"c_low": "c_low", "c_high": "c_high", "dual_clip_c": "dual_clip_c"},
    "top_entropy": {"c_low": "c_low", "c_high": "c_high", "dual_clip_c": "dual_clip_c", "q": "q",
                    "entropy_scope": "scope"},
    "bapo": {"dual_clip_c": "dual_clip_c"},  # and everything under the old method.bapo
}
SHARED_METHOD_KEYS = ("name", "objective", "aggregation")


@dataclass(frozen=True)
class MethodTraits:
    """What analysis needs to know of a method, so it never compares method names.

    Each method declares its own (`Method.traits`, src/algorithms/methods/); config.yaml
    holds them as `method.traits`. Runs written before that get them from the registry by
    their objective (analysis/core/loader.py). The record keys name numbers of the method's
    per-update decision (None: it logs none).
    """

    adaptive_bounds: bool = False  # c_low/c_high are decided per update, not parameters
    target: str | None = None  # the parameter the decision aims at (drawn as a target line)
    measure: str | None = None  # record key: the targeted quantity at the chosen bounds
    measure_at_start: str | None = None  # record key: the same at the start bounds
    moved: str | None = None  # record key: steps the bounds moved from the start (0: none)
    reached: str | None = None  # record key: the target was met (all micro-batches met it)
    undefined: str | None = None  # record key: nothing to decide on (any micro-batch)

    @classmethod
    def from_config(cls, stored: dict) -> MethodTraits:
        """Traits as config.yaml holds them; keys this version does not know are left out."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in stored.items() if k in known})

    def to_config(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def is_non_numeric(key: str) -> bool:
    return any(key == k or key.startswith(f"{k}.") for k in NON_NUMERIC_KEYS)


def applies(key: str, flat: dict[str, Any]) -> bool:
    """Whether `key` can change the numbers of the flattened config `flat` (`ONLY_UNDER`)."""
    condition = ONLY_UNDER.get(key)
    return condition is None or flat.get(condition[0]) == condition[1]


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """{'a.b': leaf}; an empty dict and a list are leaves."""
    if isinstance(node, dict) and node:
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: node}


def upgrade_method_layout(cfg: dict) -> dict:
    """`cfg` with an old-layout `method:` section (flat parameters) in today's layout."""
    method = cfg.get("method")
    if not isinstance(method, dict) or "c_low" not in method:
        return cfg  # today's layout: the shared keys and method.<objective>
    objective = method.get("objective")
    new = {k: method[k] for k in SHARED_METHOD_KEYS if k in method}
    # bapo's own parameters already had their section, method.bapo
    nested = method.get(objective)
    section = dict(nested) if isinstance(nested, dict) else {}
    section.update({new_key: method[old] for old, new_key in LEGACY_METHOD_PARAMS.get(objective, {}).items()
                    if old in method})
    new[objective] = section
    return {**cfg, "method": new}


def upgrade_config(cfg: dict) -> dict:
    """A stored config in today's layout: the method's section, and every section and key
    added since with the values the run used (`ADDED_SECTIONS`)."""
    return _with_added(dict(upgrade_method_layout(cfg)), ADDED_SECTIONS)


def _with_added(node: dict, added: dict) -> dict:
    """`node` with every key of `added` it lacks, at any depth: a section that existed before
    some of its keys (offpolicy before weight_rule, model.sft before label_smoothing)."""
    out = dict(node)
    for name, old in added.items():
        if name not in out:
            out[name] = _with_added({}, old) if isinstance(old, dict) else old
        elif isinstance(old, dict) and isinstance(out[name], dict):
            out[name] = _with_added(out[name], old)
    return out


# -- meta.json -----------------------------------------------------------------------------

def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def git_commit() -> str | None:
    """The project checkout's HEAD commit for meta.json; None outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parents[1],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def package_versions(names: tuple[str, ...]) -> dict[str, str]:
    """Installed versions of `names` for meta.json (packages not installed are left out)."""
    found = {}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def run_meta(*, versioned: tuple[str, ...], device: Any, method: str, experiment: str,
             staleness: int, seed: int, resumed_at_step: int | None, **engine: Any) -> dict[str, Any]:
    """meta.json as a run starts: provenance, the run's identity, then what only its
    engine knows (`engine`: e.g. threads and overrides, or TRL's process count)."""
    return {"git_commit": git_commit(), "versions": package_versions(versioned),
            "device": str(device), "start_time": now_iso(), "method": method,
            "experiment": experiment, "staleness": staleness, "seed": seed,
            "resumed_at_step": resumed_at_step, **engine}
