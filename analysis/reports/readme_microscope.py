"""The README's microscope table, generated from the microscope report's claims data.

The rows shown are declared below (`SHOWN`, claim ids of figures/microscope/claims.csv);
everything a row says (the measured mean, its bootstrap and trunk-mean intervals, the grain,
the trunks agreeing, the verdict, the states and trunks a row would need) is read from that CSV, never typed in.
`python -m analysis.reports.readme_table README.md` fills this block with the claims table and its verdicts counted by grain;
tests/analysis/test_readme_microscope.py fails when the README and the data disagree.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from analysis.claims.microscope_expect import OUTCOMES
from analysis.claims.rules import VERDICTS
from analysis.reports.markdown import between_markers, md_table
from analysis.reports.microscope import approx_needed

ROOT = Path(__file__).resolve().parents[2]
START, END = "<!-- microscope:start -->", "<!-- microscope:end -->"
CLAIMS = "figures/microscope/claims.csv"
# Insight 2's four classes, Sec. 4.1's two bounds, what BAPO's update does, Fig. 5, and the
# short-horizon accuracy: one row for each mechanism claim the README names
SHOWN = ("E1.high_pos", "E1.low_neg", "E1.low_pos", "E1.high_neg", "E2.raise_high",
         "E2.lower_low", "E3.share", "E3.share_b32", "E3.entropy", "E3.logp", "E4.low_pos",
         "E5.bapo", "E5.clip_higher")
GRAIN = {"branches": "one update", "horizons": "short horizon"}  # claims.csv's `table`
HEADER = ["claim (paper)", "paper", "grain", "measured: mean [95% cluster bootstrap]",
          "95% t over trunk means", "trunks agreeing", "verdict", "against the expectation",
          "states needed", "trunks needed"]


def number(x: float) -> str:
    """Three significant digits with a sign: '-0.0093', '+0.213', '+1.83'."""
    return f"{x:+.3g}"


def row_cells(row: pd.Series) -> list[str]:
    if not row["states"]:  # a claim with no data yet (its part has not run)
        measured = "no data yet"
    else:
        measured = (f"{number(row['mean'])} [{number(row['low'])}, {number(row['high'])}], "
                    f"{int(row['states'])} states")
    over_trunks = ("-" if math.isnan(row["t_low"])
                   else f"[{number(row['t_low'])}, {number(row['t_high'])}]")
    judged = (row["verdict"] if row["holm_verdict"] == row["verdict"]
              else f"{row['verdict']}; {row['holm_verdict']} after Holm")
    return [f"{row['claim']} ({row['id']})", row["paper"], GRAIN[row["table"]], measured,
            over_trunks, row["agree"] if isinstance(row["agree"], str) else "-", judged,
            row["expectation"], approx_needed(row["states_needed"]), approx_needed(row["trunks_needed"])]


def table(root: Path = ROOT) -> str:
    claims = pd.read_csv(root / CLAIMS)
    claims = claims.set_index("id", drop=False)
    missing = [i for i in SHOWN if i not in claims.index]
    if missing:
        raise LookupError(f"{CLAIMS}: no row {', '.join(missing)}; fix SHOWN in {__name__}")
    rows = pd.DataFrame([row_cells(claims.loc[i]) for i in SHOWN], columns=HEADER)
    shown = claims.loc[list(SHOWN)]
    return (md_table(rows) + "\n\n" + verdict_summary(shown) + " "
            + expectation_summary(shown) + "\n")


def expectation_summary(shown: pd.DataFrame) -> str:
    """The rows against their expectations, counted: 'Against the expectations written before
    the runs: 2 as expected, 1 not as expected, 10 pending.'"""
    counts = {o: int(shown["expectation"].str.startswith(o).sum()) for o in OUTCOMES}
    words = [f"{n} {o}" for o, n in counts.items() if n]
    return "Against the expectations written before the runs: " + ", ".join(words) + "."


def verdict_summary(shown: pd.DataFrame) -> str:
    """The rows' verdicts after Holm counted by grain, verdicts in VERDICTS order (a pilot's
    and a row's with no data after the tested ones), naming the rows that held or did not:
    'After Holm, one update (11 rows): 2 held (E1.high_pos, E1.high_neg), 9 not settled;
    short horizon (2 rows): 2 pilots (2 trunks).'"""
    rank = {v: i for i, v in enumerate(VERDICTS)}
    grains = []
    for table_name, grain in GRAIN.items():
        mine = shown.loc[shown["table"] == table_name]
        counts = mine["holm_verdict"].value_counts()
        if counts.empty:
            continue
        ordered = sorted(counts.items(), key=lambda kv: (rank.get(kv[0].split(" (")[0], len(rank)), kv[0]))
        named = {v: f" ({', '.join(mine.loc[mine['holm_verdict'] == v, 'id'])})"
                 for v in ("held", "not held")}
        words = [f"{n} {v.replace('pilot', 'pilots', 1) if n > 1 else v}{named.get(v, '')}"
                 for v, n in ordered]
        rows = counts.sum()
        grains.append(f"{grain} ({rows} row{'s' if rows > 1 else ''}): {', '.join(words)}")
    return "After Holm, " + "; ".join(grains) + "."


def fill(text: str, root: Path = ROOT) -> str:
    """`text` with the block between its markers made afresh."""
    return between_markers(text, START, END, table(root), "microscope table")
