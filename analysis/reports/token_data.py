"""The token viewer's data: one or two run dirs read, checked, paired and packed into columns.

analysis/token_view.py turns what this returns into a page. Everything here raises
`ViewError` (one line, for the user) on bad input, before anything is written.

Pairing two runs. Both runs draw the same problems and the same sampling seed at each step
(src/trainer.py `_step_seed`), so at a step whose rollout both sampled with the same
weights (the initial ones: `policy_version` 0, or step 0 in runs that predate that column)
the token at (step, update, response_id, position) is the same sample in both runs. Later
the two policies differ and so do their samples. A token is "paired" when both runs hold
that (step, update, response_id, position) and the two responses agree on every token up to
and including it: the same text in the same context. Only on the initial weights' rollouts is
it also the same sample (same behaviour probability); later it was sampled by different
weights, and its advantage can differ (the rest of its group differs). The page says which.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.core.loader import Run, RunSet, load_runs, read_tokens
from analysis.core.run_dirs import shown_path
from src.run_files import EITHER
from src.run_vocab import NO_GRADIENT_STATES, upgrade_config

ROW_COLUMNS = ["step", "update", "response_id", "group_id", "position", "token_id",
               "logp_behavior", "logp", "ratio", "advantage", "entropy", "clip_state",
               "in_loss", "c_low", "c_high", "reward", "response_length"]
VERSION_COLUMNS = ["policy_version", "lag"]  # absent from runs written before they existed
# the sampler's log-prob and the mismatch correction's weight and verdict (docs/mismatch.md);
# the last two are absent from runs written before the corrections existed
MISMATCH_COLUMNS = ["logp_sampler", "is_weight", "rs_keep"]
ROW_ORDER = ["step", "update", "group_id", "response_id", "position"]
PAIR_KEY = ["step", "update", "response_id", "position"]
REPO = Path(__file__).resolve().parents[2]
# What two runs must share to pair: the problems, the model and its warm start, the sampler
# and the order data is drawn and trained in. Whole config sections or dotted keys.
PAIRING_KEYS = ("seed", "task", "model", "rollout", "offpolicy", "numerics",
                "train.prompts_per_step", "train.group_size", "train.staleness",
                "train.staleness_mode", "train.epochs")
PAIRING_META = ("warm_start", "warm_start_weights")
# Update-record keys shown in the page's header beside each method's own decision keys.
RECORD_KEYS = ("c_low", "c_high", "tokens_pos", "tokens_neg", "tokens_zero", "tokens_in_loss",
               "clip_frac", "clip_frac_pos", "clip_frac_neg", "policy_lag", "skipped",
               "skip_reason")


class ViewError(Exception):
    """Bad input: one line for stderr, exit code 2."""


@dataclass
class ViewRun:
    run: Run
    runset: RunSet
    meta: dict[str, Any]
    rows: pd.DataFrame | None = None  # the embedded steps' token rows, in ROW_ORDER

    @property
    def path(self) -> Path:
        return self.run.path

    @property
    def label(self) -> str:
        return f"{self.run.method} seed {self.run.seed}"

    @property
    def has_versions(self) -> bool:
        return self.rows is not None and "policy_version" in self.rows.columns

    @property
    def sample(self) -> dict[str, Any] | None:
        """meta.json's export block (an exported run keeps a sample of whole responses)."""
        export = self.meta.get("export")
        return export if isinstance(export, dict) else None


def open_run(path: Path) -> ViewRun:
    """The run dir at `path`, checked to hold one run with token rows."""
    path = Path(path)
    if not path.is_dir():
        raise ViewError(f"{path}: no such run dir")
    runset = load_runs([path])
    here = [r for r in runset.runs if r.path.resolve() == path.resolve()]
    if not here:
        others = [r.path for r in runset.runs]
        if others:
            raise ViewError(f"{path} is not a run dir but holds {len(others)} run dir(s), e.g. "
                            f"{others[0]}; pass one of them")
        why = "; ".join(f"{reason}" for _, reason in runset.skipped) or f"no {EITHER}"
        raise ViewError(f"{path}: not a usable run dir ({why})")
    run = here[0]
    if not run.token_parts:
        raise ViewError(f"{path}: no token rows (tokens/*.parquet); the viewer needs them "
                        "(logger.token_fraction > 0)")
    try:
        meta = json.loads((path / "meta.json").read_text())
    except (OSError, ValueError):
        meta = {}
    return ViewRun(run, runset, meta if isinstance(meta, dict) else {})


def read_rows(view: ViewRun) -> pd.DataFrame:
    """Every complete step's token rows of the run, sorted in ROW_ORDER."""
    import pyarrow.parquet as pq

    names = set(pq.read_schema(view.run.token_parts[0]).names)
    missing = [c for c in ROW_COLUMNS if c not in names]
    if missing:
        raise ViewError(f"{view.path}: token rows lack columns {missing}")
    columns = ROW_COLUMNS + [c for c in VERSION_COLUMNS + MISMATCH_COLUMNS if c in names]
    table = read_tokens(view.run, columns, lambda run, text: None)
    if table is None or table.num_rows == 0:
        raise ViewError(f"{view.path}: token rows unreadable or empty")
    rows = table.to_pandas()
    rows["clip_state"] = rows["clip_state"].astype(str)
    return rows.sort_values(ROW_ORDER, kind="stable").reset_index(drop=True)


def logged_steps(rows: pd.DataFrame) -> list[int]:
    return sorted(int(s) for s in rows["step"].unique())


def _config_value(cfg: dict, dotted: str) -> Any:
    node: Any = cfg
    for key in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def check_configs_pair(a: ViewRun, b: ViewRun) -> None:
    """Refuse two runs that cannot have drawn the same problems and samples."""
    cfg_a, cfg_b = upgrade_config(a.run.config), upgrade_config(b.run.config)
    for key in PAIRING_KEYS:
        va, vb = _config_value(cfg_a, key), _config_value(cfg_b, key)
        if va != vb:
            shown = (f"{va!r} vs {vb!r}" if not isinstance(va, dict) and not isinstance(vb, dict)
                     else "differs")
            raise ViewError(f"the runs do not pair: config {key} {shown} ({a.path} vs {b.path})")
    for key in PAIRING_META:
        va, vb = a.meta.get(key), b.meta.get(key)
        if va is not None and vb is not None and va != vb:
            raise ViewError(f"the runs do not pair: meta.json {key} {va!r} vs {vb!r} "
                            f"({a.path} vs {b.path})")


def same_weights(rows: pd.DataFrame, has_versions: bool) -> np.ndarray:
    """Rows sampled by the initial weights (see the module docstring)."""
    if has_versions:
        return rows["policy_version"].to_numpy() == 0
    return rows["step"].to_numpy() == 0


def _shared_positions(a: ViewRun, b: ViewRun) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Rows at a (step, update, response_id, position) both runs hold, in PAIR_KEY order;
    whether their tokens agree; whether both were sampled by the initial weights."""
    assert a.rows is not None and b.rows is not None
    left = a.rows[PAIR_KEY + ["token_id"]].assign(row_a=np.arange(len(a.rows)),
                                                   init_a=same_weights(a.rows, a.has_versions))
    right = b.rows[PAIR_KEY + ["token_id"]].assign(row_b=np.arange(len(b.rows)),
                                                    init_b=same_weights(b.rows, b.has_versions))
    shared = left.merge(right, on=PAIR_KEY, suffixes=("_a", "_b")).sort_values(PAIR_KEY)
    agree = shared["token_id_a"].to_numpy() == shared["token_id_b"].to_numpy()
    initial = (shared["init_a"] & shared["init_b"]).to_numpy()
    return shared, agree, initial


def check_tokens_pair(a: ViewRun, b: ViewRun) -> dict[str, Any]:
    """Refuse two runs whose token rows sampled by the initial weights disagree (over every
    logged step, not only those shown); what was checked, for the page."""
    shared, agree, initial = _shared_positions(a, b)
    if (initial & ~agree).any():
        first = shared[initial & ~agree].iloc[0]
        raise ViewError(
            f"the runs do not pair: {int((initial & ~agree).sum())} of {int(initial.sum())} "
            "token positions both sampled with the initial weights hold different tokens "
            f"(first at step {first['step']}, update {first['update']}, response "
            f"{first['response_id']}, position {first['position']}); same seed and task?")
    return {"initial_checked": int(initial.sum()),
            "initial_steps": sorted(int(s) for s in shared.loc[initial, "step"].unique())}


def pair_rows(a: ViewRun, b: ViewRun) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(partner of each row of a in b, partner of each row of b in a, whether each pair of a
    was sampled by the initial weights, the number of pairs); -1 where a row has none."""
    shared, agree, initial = _shared_positions(a, b)
    # A pair needs the two responses to agree on every earlier position too, from position 0.
    response = [shared[c].to_numpy() for c in ("step", "update", "response_id")]
    starts = np.ones(len(shared), bool)
    if len(shared):
        starts[1:] = np.any([x[1:] != x[:-1] for x in response], axis=0)
    group = np.cumsum(starts) - 1
    first_index = np.flatnonzero(starts)[group]
    contiguous = shared["position"].to_numpy() == np.arange(len(shared)) - first_index
    ok = agree & contiguous
    # prefix: every row from the response's first shared row up to here is ok
    bad_so_far = np.cumsum(~ok)
    bad_before_start = (bad_so_far - (~ok).astype(int))[first_index]
    paired = ok & (bad_so_far == bad_before_start)
    rows_a, rows_b = shared["row_a"].to_numpy()[paired], shared["row_b"].to_numpy()[paired]
    partner_a = np.full(len(a.rows), -1, np.int32)
    partner_b = np.full(len(b.rows), -1, np.int32)
    partner_a[rows_a] = rows_b
    partner_b[rows_b] = rows_a
    exact_a = np.zeros(len(a.rows), bool)
    exact_a[rows_a] = initial[paired]
    return partner_a, partner_b, exact_a, int(paired.sum())


# -- packing ---------------------------------------------------------------------------------

def update_records(view: ViewRun, steps: list[int]) -> list[dict[str, Any]]:
    """The run's update records at `steps`: bounds, token counts, and the method's own
    decision numbers under the names its traits give them (None where not logged)."""
    traits = view.run.traits
    decision = {"measure": traits.measure, "measure_at_start": traits.measure_at_start,
                "moved": traits.moved, "reached": traits.reached, "undefined": traits.undefined}
    ups = view.runset.updates
    ups = ups[ups["step"].isin(steps)] if len(ups) else ups
    out = []
    for rec in ups.to_dict("records"):
        entry: dict[str, Any] = {"step": int(rec["step"]), "update": int(rec["update"])}
        for key in RECORD_KEYS:
            entry[key] = _plain(rec.get(key))
        for role, key in decision.items():
            entry[role] = _plain(rec.get(key)) if key else None
        out.append(entry)
    return out


def _plain(value: Any) -> Any:
    """A JSON-safe value: NaN and missing become None, numpy scalars Python ones."""
    if value is None:
        return None
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def run_info(view: ViewRun) -> dict[str, Any]:
    """What the page says about a run: identity, its method's traits, how its rows were kept."""
    traits = view.run.traits
    return {
        "label": view.label, "dir": shown_path(view.path), "method": view.run.method,
        "objective": view.run.cfg("method.objective"), "seed": view.run.seed,
        "staleness": view.run.staleness, "experiment": view.run.experiment,
        "adaptive": traits.adaptive_bounds,
        "target_name": traits.target,
        "target": _plain(view.run.method_param(traits.target)) if traits.target else None,
        "decision_keys": {"measure": traits.measure, "measure_at_start": traits.measure_at_start,
                          "moved": traits.moved},
        "sample": view.sample, "versions": view.has_versions,
        "no_gradient": list(NO_GRADIENT_STATES),
    }
