"""Why the positive share stays near 0.5: failing responses are longer across problems,
barely within a group.

    python experiments/calibration/length_balance.py runs/delay_16 [...]   # -> length_balance.md

With group-normalised advantages a group with a share p of correct responses gives each
correct response A+ = (1 - p) / s and each failing one A- = -p / s, so with ratios near 1
the group's positive and negative contributions (sum of |A| over its tokens) are
G p (1 - p) / s * L+ and G p (1 - p) / s * L-: their split is L+ : L-, the mean lengths
*within the group*. Over a rollout, with w = p (1 - p) / s per mixed group,

    rho = sum_g w_g L+_g / sum_g w_g (L+_g + L-_g),

so BAPO's search starts (rho < rho0 = 0.4) only where failing responses are 1.5x as long
as correct ones to the same problem. The script measures, per run, from the full token rows
(every response once, at the update that trained on it): the pooled lengths, the
within-group ratio, the rho this identity implies, and the logged rho before the search.
Exported runs keep a sample of responses, too few whole groups: point it at run dirs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from analysis.core.lags import lag_table, steady_updates  # noqa: E402
from analysis.core.loader import load_runs  # noqa: E402
from analysis.reports.markdown import md_table  # noqa: E402

COLUMNS = ["step", "response_id", "group_id", "advantage", "reward", "response_length"]


def group_lengths(tokens: pd.DataFrame) -> pd.DataFrame:
    """One row per mixed group (some correct, some not): p, L+, L-, weight w."""
    resp = tokens.drop_duplicates(["run_id", "step", "response_id"])
    resp = resp.assign(correct=resp["advantage"] > 0, failing=resp["advantage"] < 0)
    g = resp.groupby(["run_id", "step", "group_id"], observed=True)
    out = pd.DataFrame({
        "p": g["correct"].mean(),
        "n_fail": g["failing"].sum(),
        "L_pos": resp[resp["correct"]].groupby(["run_id", "step", "group_id"],
                                               observed=True)["response_length"].mean(),
        "L_neg": resp[resp["failing"]].groupby(["run_id", "step", "group_id"],
                                               observed=True)["response_length"].mean(),
    }).dropna()
    out = out[(out["p"] > 0) & (out["n_fail"] > 0)]
    out["w"] = np.sqrt(out["p"] * (1 - out["p"]))  # p (1 - p) / s with s = sqrt(p (1 - p))
    return out.reset_index()


def balance(groups: pd.DataFrame) -> pd.Series:
    w = groups["w"]
    return pd.Series({
        "mixed groups": len(groups),
        "within-group L-/L+": float((w * groups["L_neg"]).sum() / (w * groups["L_pos"]).sum()),
        "implied rho": float((w * groups["L_pos"]).sum()
                             / (w * (groups["L_pos"] + groups["L_neg"])).sum()),
    })


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--out", type=Path, default=HERE / "length_balance.md")
    args = p.parse_args(argv)
    runs = load_runs(args.runs)
    runs = runs.subset(lambda r: r.status == "finished" and r.token_sample_fraction is None)
    if not runs.runs:
        raise SystemExit("no finished run dirs with every token row under the given paths "
                         "(exported runs keep a sample of responses: use the run dirs)")
    lags = lag_table(runs).set_index("run_id")
    steady = steady_updates(runs)
    rows = []
    for run in runs.runs:
        toks = runs.tokens(COLUMNS, [run])
        toks = toks[toks["step"] >= lags.loc[run.run_id, "warmup_steps"]]
        resp = toks.drop_duplicates(["step", "response_id"])
        mine = steady[steady["run_id"] == run.run_id]
        rows.append({
            "run": run.run_id, "method": run.method, "lag": lags.loc[run.run_id, "lag"],
            "pooled L+": round(float(resp.loc[resp["advantage"] > 0, "response_length"].mean()), 1),
            "pooled L-": round(float(resp.loc[resp["advantage"] < 0, "response_length"].mean()), 1),
            **balance(group_lengths(toks)).round(3).to_dict(),
            "logged rho before search": round(float(pd.to_numeric(
                mine["rho_before"], errors="coerce").mean()), 3),
            "updates rho before < 0.4": f"{(pd.to_numeric(mine['rho_before'], errors='coerce') < 0.4).mean():.0%}",
        })
    table = pd.DataFrame(rows)
    text = ("# Length balance: why the positive share stays near 0.5\n\nWritten by "
            "`length_balance.py` (its docstring derives the identity). Steady steps only; "
            "lengths in tokens. `implied rho` is the rollout-level share the within-group "
            "lengths give at ratios of 1; the logged one is per mini-batch, before the search.\n\n"
            + md_table(table) + "\n")
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
