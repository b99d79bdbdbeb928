"""The seven testbed targets (testbed_targets.md) judged on the grid's seeds, not one pilot.

    python experiments/calibration/testbed_judge.py [--runs runs [ROOT ...]] [--testbed ramble]

Reads the testbed grid's run dirs under each root: <root>/<testbed>_1x/ppo and
<testbed>_4x/{ppo,bapo} under any override level, one row per run (testbed_targets.summarize),
and judges each target over the seeds present, with the 95% t-interval over seeds (paired by
seed where two cells are compared). A range target (3, 5, 6) is met when the whole interval
lies inside its range. Writes `testbed_judgement.md` and the per-run rows to
`testbed_grid_rows.csv`.

Targets 3 and 5 need bapo 4x's whole token rows (band mass, length ratio), which an export
thins to a sample: those runs must be read from `runs/` (or rerun there: the grid reruns bit
for bit, experiments/verify_cell.py). Every other column comes from metrics.jsonl
(metrics.jsonl.gz in an export) and meta.json, which the export keeps whole, so the ppo cells
may be read from the exported root.
Rows are merged into the CSV by (cell, pilot, seed): a measurement from whole token rows
beats one from a sample, and a newer one an older; rows of runs whose dirs are gone stay as
they were measured, so the judgement gathers its seeds over several sessions.

A target is `met` when its interval settles it (target 1: the mean at least +0.10 and the
interval above 0; target 2: 4x's gain interval above 0 and the paired 4x - 1x interval below
0); `not met` when the interval settles the other side or the mean misses a range; and
`not settled` otherwise. One seed gives no interval, so nothing is `met` on one seed.

`--testbed smol` judges the pretrained testbed (smol_1x, smol_4x) into its own pair of files,
`testbed_judgement_smol.md` and `testbed_grid_rows_smol.csv`.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]

from testbed_targets import summarize  # noqa: E402

from analysis.core.stats import fmt_ci, mean_ci  # noqa: E402
from src.config_fields import config_exit  # noqa: E402
from src.lifecycle import read_status  # noqa: E402


def outputs(testbed: str) -> tuple[Path, Path]:
    """The judgement and its per-run rows for `testbed`: the ramble testbed's keep the names
    they were committed under, every other testbed gets its own pair."""
    suffix = "" if testbed == "ramble" else f"_{testbed}"
    return HERE / f"testbed_judgement{suffix}.md", HERE / f"testbed_grid_rows{suffix}.csv"


CELLS = (("1x", "ppo"), ("4x", "ppo"), ("4x", "bapo"))


def collect(roots: list[Path], testbed: str) -> pd.DataFrame:
    rows = []
    for runs in roots:
        for level, method in CELLS:
            for run_dir in sorted((runs / f"{testbed}_{level}" / method).glob("**/seed*")):
                if (read_status(run_dir) or {}).get("status") == "finished":
                    rows.append({**summarize(run_dir), "cell": f"{method} {level}"})
    if not rows:
        config_exit(f"no finished runs under {', '.join(map(str, roots))} in "
                    f"{testbed}_{{1x,4x}}/{{ppo,bapo}}; run `python experiments/run_sweep.py "
                    "testbed_grid` first")
    return pd.DataFrame(rows)


KEY = ["cell", "pilot", "seed"]
TOKEN_COLUMNS = ["band_mass", "length_ratio"]


def merge_rows(kept: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """One row per (cell, pilot, seed) from `kept` (the CSV's earlier rows) and `measured`
    (this call's, in the order the roots were given): a row with whole-token columns beats
    one without, then a measured row beats a kept one, then the first root beats later ones.
    Sorted by cell and seed."""
    both = pd.concat([measured.assign(_age=0), kept.assign(_age=1)], ignore_index=True)
    both["_sampled"] = both[TOKEN_COLUMNS].isna().any(axis=1).astype(int)
    both["_order"] = range(len(both))
    best = both.sort_values(["_sampled", "_age", "_order"]).drop_duplicates(KEY, keep="first")
    return (best.drop(columns=["_age", "_sampled", "_order"])
            .sort_values(["cell", "seed", "pilot"]).reset_index(drop=True))


def check_one_level(rows: pd.DataFrame, csv_name: str) -> pd.DataFrame:
    """`rows`, unless a seed of a cell appears under two override levels (two thread
    counts, say), which would count one seed twice in the intervals."""
    dupes = rows[rows.duplicated(["cell", "seed"], keep=False)]
    if len(dupes):
        config_exit(f"{csv_name} holds one seed of a cell twice under different override "
                    f"levels ({sorted(set(dupes['pilot']))}); judge one level: remove the "
                    "other level's rows from the CSV or its runs from --runs")
    return rows


def check_whole_tokens(rows: pd.DataFrame, testbed: str) -> pd.DataFrame:
    """`rows`, unless a bapo 4x run lacks the whole token rows that targets 3 and 5 read; the
    refusal gives the rerun command of `testbed`'s 4x experiment."""
    bapo = rows[rows["cell"] == "bapo 4x"]
    if len(missing := bapo[bapo[TOKEN_COLUMNS].isna().any(axis=1)]):
        seeds = ",".join(str(int(s)) for s in sorted(missing["seed"]))
        config_exit(f"bapo 4x seed(s) {seeds} have no whole token rows (an export keeps a "
                    "sample), which band mass and the length ratio need; rerun them into runs/: "
                    f"python -m src.run -m experiment={testbed}_4x method=bapo seed={seeds} "
                    "train.threads=1, then judge with --runs runs <the exported root>")
    return rows


def cell(rows: pd.DataFrame, name: str) -> pd.DataFrame:
    return rows[rows["cell"] == name].set_index("seed").sort_index()


def ci(values) -> tuple[str, float, float, float, int]:
    m, lo, hi, n = mean_ci(values)
    return fmt_ci(m, lo, hi, n), m, lo, hi, n


def verdict(ok: bool, settled: bool) -> str:
    return "met" if ok and settled else ("not met" if settled else "not settled")


def in_range(lo: float, hi: float, n: int, low: float, high: float) -> str:
    """`met` when the whole interval lies in [low, high], `not met` when it lies wholly
    outside, `not settled` otherwise (and on one seed)."""
    if n < 2 or math.isnan(lo):
        return "not settled"
    if low <= lo and hi <= high:
        return "met"
    return "not met" if hi < low or lo > high else "not settled"


def judge(rows: pd.DataFrame) -> list[tuple[str, str, str]]:
    one, four, bapo = cell(rows, "ppo 1x"), cell(rows, "ppo 4x"), cell(rows, "bapo 4x")
    out = []
    text, m, lo, hi, n = ci(one["gain"])
    out.append(("1. on-policy ppo learns (1x gain >= +0.10, interval above 0)", text,
                "not settled" if n < 2 else ("met" if m >= 0.10 and lo > 0
                                             else "not met" if hi < 0.10 else "not settled")))
    paired = (four["greedy_final"] - one["greedy_final"]).dropna()
    g_text, _, g_lo, g_hi, g_n = ci(four["gain"])
    p_text, _, p_lo, p_hi, p_n = ci(paired)
    ok2 = g_n >= 2 and p_n >= 2 and g_lo > 0 and p_hi < 0
    bad2 = (g_n >= 2 and g_hi < 0) or (p_n >= 2 and p_lo > 0)
    out.append(("2. 4x ppo above its step 0 and below 1x (paired)",
                f"4x gain {g_text}; 4x - 1x {p_text}", verdict(ok2, ok2 or bad2)))
    s_text, _, s_lo, s_hi, s_n = ci(bapo["share_mean"])
    l_text = ci(bapo["length_ratio"])[0]
    out.append(("3. bapo's positive share at the start bounds in 0.33-0.40 (length ratio ~1.5)",
                f"share {s_text}; length ratio {l_text}",
                in_range(s_lo, s_hi, s_n, 0.33, 0.40)))
    sd_max = bapo["share_sd"].max()
    out.append(("4. sd of the share over updates <= 0.06 (every seed)",
                f"largest over seeds {sd_max:.3f} (n={len(bapo)})",
                "not settled" if len(bapo) < 2 else verdict(sd_max <= 0.06, True)))
    b_text, _, b_lo, b_hi, b_n = ci(bapo["band_mass"])
    r_text, _, r_lo, r_hi, _ = ci(bapo["moved_reached"])
    band = in_range(b_lo, b_hi, b_n, 0.05, 0.10)
    reach = "not settled" if b_n < 2 else "met" if r_lo >= 0.30 else "not met" if r_hi < 0.30 else "not settled"
    out.append(("5. band mass 0.05-0.10 and moved-and-reached >= 0.30 (bapo 4x)",
                f"band mass {b_text}; moved and reached {r_text}",
                "met" if band == reach == "met" else
                "not met" if "not met" in (band, reach) else "not settled"))
    c_text, _, c_lo, c_hi, c_n = ci(four["clip_frac"])
    out.append(("6. the clip binds on 1-4% of tokens (ppo 4x)", c_text,
                in_range(c_lo, c_hi, c_n, 0.01, 0.04)))
    both = pd.concat([four, bapo])
    wall = both["wall_min"].max()
    out.append(("7. a 4x run in about 10 minutes on one thread (slowest 4x run)",
                f"{wall:.1f} min (threads {sorted(set(both['threads']))})",
                "not settled" if math.isnan(wall) else verdict(wall <= 10.5, True)))
    return out


def sampled_beside(rows: pd.DataFrame) -> str | None:
    """Targets 1 and 2 on sampled accuracy, for a grid that declared it its primary metric:
    shown beside the verdicts, which keep the targets' greedy rule; None where the rows
    have no sampled accuracy (rows measured before it was read)."""
    if "sampled_gain" not in rows:
        return None
    one, four = cell(rows, "ppo 1x"), cell(rows, "ppo 4x")
    paired = (four["sampled_final"] - one["sampled_final"]).dropna()
    if one["sampled_gain"].isna().all() or four["sampled_gain"].isna().all():
        return None
    return ("On sampled accuracy, beside the verdicts (which keep the targets' greedy rule): "
            f"1x ppo gain {ci(one['sampled_gain'].dropna())[0]}; "
            f"4x ppo gain {ci(four['sampled_gain'].dropna())[0]}; "
            f"4x - 1x (paired) {ci(paired)[0]}.")


# Target 2 compares 4x with 1x at equal updates, where 1x trains on four times the responses
# per update; each testbed's 1x control at the 4x update size separates the two.
TARGET_2_NOTES = {
    "ramble": (
        "Target 2 compares at equal updates, where 1x trains on four times the responses (128 "
        "per update against 4x's 32). At equal update size and data, the 1x control "
        "`ramble_1x_b32` (32 responses per update, a fresh rollout each update) ends below 4x "
        "and does not learn (figures/testbed_grid/REPORT.md, \"Staleness against data and batch "
        "size\"): what target 2 measures is the cost of the smaller batch and data, not of "
        "staleness."),
    "smol": (
        "Target 2 compares at equal updates, where 1x trains on four times the responses (32 "
        "per update against 4x's 8). The 1x control at the 4x update size, `smol_1x_b8` (8 "
        "responses per update, a fresh rollout each update), separates the two: its rows in "
        "figures/smol_grid/REPORT.md (\"Staleness against data and batch size\") say how much of "
        "4x - 1x is the smaller batch and data and how much is reuse."),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, nargs="+", default=[Path("runs")],
                        help="roots holding <testbed>_1x and _4x (e.g. runs and the exported "
                             "experiments/testbed_grid)")
    parser.add_argument("--testbed", default="ramble")
    args = parser.parse_args()
    md, csv = outputs(args.testbed)
    measured = collect(args.runs, args.testbed)
    kept = pd.read_csv(csv) if csv.is_file() else measured.iloc[:0]
    rows = check_whole_tokens(check_one_level(merge_rows(kept, measured), csv.name), args.testbed)
    rows.to_csv(csv, index=False, float_format="%.4f")
    seeds = {c: sorted(cell(rows, c).index) for _, c in rows[["cell"]].drop_duplicates().itertuples()}
    lines = ["| target | measured (mean ± 95% t half-width over seeds) | verdict |", "|---|---|---|"]
    lines += [f"| {t} | {m} | {v} |" for t, m, v in judge(rows)]
    md.write_text(
        f"# The testbed targets judged on the grid's seeds ({args.testbed})\n\n"
        "Written by `testbed_judge.py` from the testbed grid's run dirs: bapo 4x's band mass "
        "and length ratio from its whole token rows (an export keeps only a sample, so those "
        "runs are rerun bit for bit), every other column from metrics.jsonl and meta.json, "
        f"which an export keeps whole; per-run rows in `{csv.name}`, gathered over "
        "sessions (a row stays when its run dir is gone). Seeds per cell: "
        + "; ".join(f"{c}: {s}" for c, s in seeds.items()) + ".\n\n" + "\n".join(lines) + "\n\n"
        + "".join(f"{line}\n\n" for line in [sampled_beside(rows)] if line)
        + (TARGET_2_NOTES[args.testbed] + "\n" if args.testbed in TARGET_2_NOTES else ""))
    print(md.read_text())


if __name__ == "__main__":
    main()
