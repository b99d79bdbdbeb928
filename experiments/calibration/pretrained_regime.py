"""The pretrained testbed's regime, measured (pretrained.md; pilots P* in pilots.yaml).

    python experiments/calibration/pretrained_regime.py pass [--samples 4] OVERRIDE ...
    python experiments/calibration/pretrained_regime.py updates RUN_DIR [RUN_DIR ...]
    python experiments/calibration/pretrained_regime.py summary RUN_DIR [RUN_DIR ...]

`pass`: the model as the overrides build it (e.g. `experiment=smol_4x`) samples
`--samples` responses to each of the task's first `task.eval_problems` held-out problems at
the rollout's temperature, with the rollout backend, as a training rollout would. Prints
pass@1 (the mean reward), the expected share of groups of `--group` samples that mix right
and wrong (groups that carry a gradient; from each prompt's own pass rate), the share of sampled tokens with p < 0.5 (the
sampler's own probability), the mean response length, the share cut by the length budget,
and the seconds it took.

`updates`: a run's regime per update index, from its whole token rows. A run of one or
more rollouts at staleness k (e.g. `train.staleness=8`) is a frozen rollout scored after
0..k-1 updates: update j trains on a mini-batch its rollout's weights generated j updates
ago, with the ratio `pi_now / pi_behaviour` the method saw. Per update index: the clip
fraction (ppo's clip states at its bounds: A > 0 and r > c_high, or A < 0 and r < c_low),
the share of tokens with r outside [0.8, 1.2], the band mass (the share of `sum |r A|` on
A < 0 tokens with r in [0.6, 0.9] and A > 0 tokens with r in [1.2, 3.0]: what BAPO's search
can move; testbed_targets.md target 5), and the mean |log r|; then the seconds per update,
per rollout and per behaviour pass from metrics.jsonl.

`summary`: one row per run (seconds per rollout, behaviour pass, update and step; the clip
fraction, share outside [0.8, 1.2] and band mass over all its updates' loss tokens, as
testbed_targets.md counts them; mean |log r| of the stale updates; the tail share of the
sampled tokens; mean training reward and response length; evals), merged by pilot into
pretrained_pilots.csv (rows of runs whose dirs are gone stay as measured), and the table in
pretrained.md rewritten between its markers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]

from testbed_targets import NEG_BAND, POS_BAND, TAIL_P  # noqa: E402

from src.config_fields import config_exit  # noqa: E402
from src.pinning import pin_process  # noqa: E402
from src.run_files import EITHER, has_metrics, metrics_records  # noqa: E402

pin_process()  # the numerics mode, before torch loads (its pilots were measured pinned)

PPO_BOUNDS = (0.8, 1.2)


def measure_pass(overrides: list[str], samples: int, group: int) -> dict:
    import torch

    from src.build import build_backend, build_parts, compose_config, prompt_formatter

    cfg = compose_config(overrides)
    t0 = time.perf_counter()
    parts = build_parts(cfg, progress=False)
    load_s = time.perf_counter() - t0
    backend = build_backend(cfg.rollout, parts.model, parts.tokenizer, model_path=cfg.model.path)
    fmt = prompt_formatter(cfg.model, parts.tokenizer)
    problems = parts.task.eval_problems(cfg.task.eval_problems)
    t0 = time.perf_counter()
    roll = backend.generate([fmt(p.prompt) for p in problems], num_samples=samples,
                            max_new_tokens=cfg.rollout.max_new_tokens,
                            temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
                            seed=cfg.seed + 12_345)
    gen_s = time.perf_counter() - t0
    scores = np.array([parts.task.score(problems[g], text)
                       for g, text in zip(roll.group_ids.tolist(), roll.texts, strict=True)])
    # A prompt's chance of a mixed group of `group` samples, 1 - p^G - (1 - p)^G, from its own
    # pass rate over every sample of it (the held-out stream repeats a small task's prompts);
    # averaged over the problems, as a rollout draws them.
    prompts = pd.Series([problems[g].prompt for g in roll.group_ids.tolist()])
    rate = pd.Series(scores).groupby(prompts).mean()
    p = rate[[q.prompt for q in problems]].to_numpy()
    mixed = float((1 - p**group - (1 - p) ** group).mean())
    mask = roll.response_mask
    lengths = mask.sum(1).float()
    probs = torch.exp(roll.sampler_logp[mask])
    return {"overrides": " ".join(overrides), "problems": len(problems), "samples": samples,
            "pass_at_1": float(scores.mean()), "distinct_prompts": int(rate.size),
            f"mixed_groups_of_{group}": mixed,
            "tail": float((probs < TAIL_P).float().mean()),
            "mean_length": float(lengths.mean()),
            "cut": float((lengths >= cfg.rollout.max_new_tokens).float().mean()),
            "load_s": round(load_s, 1), "generate_s": round(gen_s, 1),
            "examples": [roll.texts[i] for i in range(min(4, len(roll.texts)))]}


TOKEN_COLUMNS = ["step", "update", "ratio", "advantage", "in_loss", "clip_state", "logp_behavior"]


def update_table(run_dir: Path) -> pd.DataFrame:
    parts = sorted((run_dir / "tokens").glob("*.parquet"))
    if not parts:
        config_exit(f"{run_dir}: no token rows (tokens/*.parquet); run with logger.token_fraction=1")
    t = pd.concat([pd.read_parquet(p, columns=TOKEN_COLUMNS) for p in parts], ignore_index=True)
    t = t[t["in_loss"]]
    r, a = t["ratio"], t["advantage"]
    mass = (r * a).abs()
    band = ((a < 0) & r.between(*NEG_BAND)) | ((a > 0) & r.between(*POS_BAND))
    t = t.assign(mass=mass, band=mass.where(band, 0.0),
                 clipped=t["clip_state"].isin(["clip_low", "clip_high", "dual"]),
                 outside=(r < PPO_BOUNDS[0]) | (r > PPO_BOUNDS[1]),
                 abs_log_r=np.abs(np.log(r)), tail=np.exp(t["logp_behavior"]) < TAIL_P)
    g = t.groupby("update")
    rows = pd.DataFrame({"tokens": g.size(), "clip_frac": g["clipped"].mean(),
                         "outside_0.8_1.2": g["outside"].mean(),
                         "band_mass": g["band"].sum() / g["mass"].sum(),
                         "mean_abs_log_r": g["abs_log_r"].mean(), "tail": g["tail"].mean()})
    records = metrics_records(run_dir)
    updates = pd.DataFrame([r for r in records if r["kind"] == "update"])
    if "time_update_s" in updates:
        rows["time_update_s"] = updates.groupby("update")["time_update_s"].mean()
    return rows


def step_times(run_dir: Path) -> dict:
    records = metrics_records(run_dir)
    steps = [r for r in records if r["kind"] == "step"]
    keys = [k for k in steps[0] if k.startswith("time_")] if steps else []
    return {k: float(np.mean([s[k] for s in steps])) for k in keys}


CSV, MD = HERE / "pretrained_pilots.csv", HERE / "pretrained.md"
TABLE_START, TABLE_END = "<!-- pilots table: pretrained_regime.py summary -->", "<!-- end of pilots table -->"
FMT = {"s_rollout": 1, "s_behaviour": 1, "s_update": 1, "s_step": 1, "step_vs_P04": 2,
       "clip": 4, "outside": 3, "band_mass": 3, "abs_log_r": 3, "tail": 3, "reward": 3,
       "length": 1, "sampled_0": 3, "sampled_end": 3, "greedy_0": 3, "greedy_end": 3}


def summary_row(run_dir: Path) -> dict:
    """One run: its seconds per part of a step, and its regime over every update (as
    testbed_targets.md's targets 5 and 6 count it: update 0's on-policy tokens included)."""
    import yaml

    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    records = metrics_records(run_dir)
    steps = [r for r in records if r["kind"] == "step"]
    updates = [r for r in records if r["kind"] == "update" and not r.get("skipped")]
    evals = [r for r in records if r["kind"] == "eval"]
    per_update = update_table(run_dir)
    t = pd.concat([pd.read_parquet(p, columns=TOKEN_COLUMNS)
                   for p in sorted((run_dir / "tokens").glob("*.parquet"))], ignore_index=True)
    t = t[t["in_loss"]]
    r, a = t["ratio"], t["advantage"]
    mass = (r * a).abs()
    band = ((a < 0) & r.between(*NEG_BAND)) | ((a > 0) & r.between(*POS_BAND))

    def ev(key: str, i: int) -> float:
        vals = [e[key] for e in evals if key in e]
        return vals[i] if vals else float("nan")

    return {"pilot": run_dir.parent.name, "lr": cfg["train"]["lr"],
            "staleness": cfg["train"]["staleness"], "steps": len(steps),
            "responses": cfg["train"]["prompts_per_step"] * cfg["train"]["group_size"],
            "s_rollout": np.mean([s["time_rollout_s"] for s in steps]),
            "s_behaviour": np.mean([s["time_behavior_s"] for s in steps]),
            "s_update": np.mean([u["time_update_s"] for u in updates]),
            "s_step": np.mean([s["time_step_s"] for s in steps]),
            "clip": float(t["clip_state"].isin(["clip_low", "clip_high", "dual"]).mean()),
            "outside": float(((r < PPO_BOUNDS[0]) | (r > PPO_BOUNDS[1])).mean()),
            "band_mass": float(mass[band].sum() / mass.sum()),
            "abs_log_r": float(np.abs(np.log(r[t["update"] > 0])).mean()),
            "tail": float((np.exp(t["logp_behavior"]) < TAIL_P).mean()),  # each token once
            "reward": np.mean([s["reward_mean"] for s in steps]),
            "length": np.mean([s.get("response_length_mean", np.nan) for s in steps]),
            "sampled_0": ev("sampled_accuracy", 0), "sampled_end": ev("sampled_accuracy", -1),
            "greedy_0": ev("greedy_accuracy", 0), "greedy_end": ev("greedy_accuracy", -1),
            "per_update_clip": " ".join(f"{v:.4f}" for v in per_update["clip_frac"]),
            "per_update_band": " ".join(f"{v:.3f}" for v in per_update["band_mass"])}


def write_summary(rows: pd.DataFrame) -> str:
    rows = rows.sort_values("pilot").reset_index(drop=True)
    base = rows.loc[rows["pilot"] == "P04_smol_4x_base", "s_step"]
    rows["step_vs_P04"] = rows["s_step"] / float(base.iloc[0]) if len(base) else np.nan
    rows.to_csv(CSV, index=False, float_format="%.5g")
    head = ["pilot", "lr", "staleness", "steps", "responses", *FMT]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, row in rows.iterrows():
        cells = [str(row[h]) if h not in FMT else ("-" if pd.isna(row[h]) else f"{row[h]:.{FMT[h]}f}")
                 for h in head]
        lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    if MD.is_file() and TABLE_START in MD.read_text():
        text = MD.read_text()
        before, rest = text.split(TABLE_START, 1)
        after = rest.split(TABLE_END, 1)[1]
        MD.write_text(f"{before}{TABLE_START}\n{table}\n{TABLE_END}{after}")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("pass")
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("overrides", nargs="*")
    u = sub.add_parser("updates")
    u.add_argument("runs", nargs="+", type=Path)
    m = sub.add_parser("summary")
    m.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args()
    if args.what == "pass":
        print(json.dumps(measure_pass(args.overrides, args.samples, args.group), indent=1))
        return
    if args.what == "summary":
        new = pd.DataFrame([summary_row(p) for p in args.runs])
        old = pd.read_csv(CSV) if CSV.is_file() else new.iloc[:0]
        keep = old[~old["pilot"].isin(new["pilot"])]
        print(write_summary(pd.concat([keep, new], ignore_index=True)))
        return
    for run_dir in args.runs:
        if not has_metrics(run_dir):
            config_exit(f"{run_dir} is not a run dir (no {EITHER})")
        print(f"## {run_dir}")
        print(update_table(run_dir).to_string(float_format=lambda v: f"{v:.4f}"))
        print(json.dumps(step_times(run_dir)))


if __name__ == "__main__":
    main()
