"""The README's claims table, generated from the committed reports' claims data.

Each line of the table is declared below (`LINES`): the claim as the README words it, the
paper's value in short, and which row of which report's claims CSV it shows (its `key`,
and for rows repeated per lag the lag it names). What the table says of that row (the
numbers, the primary metric first, the verdict, the seeds it would need) is read from the
CSV, never typed in. Fill README.md's table between its markers:

    python -m analysis.reports.readme_table README.md

(which also fills the microscope's table: analysis/reports/readme_microscope.py), or print
the claims table with no argument. tests/analysis/test_readme_table.py fails when the
README's table and the data disagree.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

if __package__ in (None, ""):  # run as a script: make `analysis` importable from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from analysis.core.multiplicity import PILOT, pilot_label  # noqa: E402
from analysis.reports import readme_microscope  # noqa: E402
from analysis.reports.markdown import between_markers  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
START, END = "<!-- claims:start -->", "<!-- claims:end -->"
TESTBED, BATCH = "figures/testbed_grid/claims.csv", "figures/testbed_grid/batch_claims.csv"
RAMBLE_LAGS, CHAIN_LAGS = "figures/testbed_lags/lag_claims.csv", "figures/lag_large/lag_claims.csv"
INTEL = "figures/mismatch_grid/replication.csv"
SWEEPS = "experiments/sweeps.yaml"
AFTER = "stated after the runs"  # sweeps.yaml's comment on a primary metric chosen late
FIG11 = "62.0 vs 54.2"
# One estimate as a report prints it: '-0.037 ± 0.028 (n=8; 2 of 8 seeds > 0)', '0.725 (n=8)'.
ESTIMATE = re.compile(r"[+-]?\d+\.\d+(?: ± [0-9.e-]+)? \(n=\d+[^)]*\)")
NOT_LEARNING = re.compile(r"(?:^|; )([\w ().-]+?) does not learn here")


@dataclass(frozen=True)
class Line:
    """One line of the README's table and the claims row it shows."""

    claim: str  # as the README words it, with the paper's figure
    paper: str  # the paper's value, in short
    report: str  # the claims CSV, relative to the repo
    key: str  # the row's key there
    where: str = ""  # a word of the row's claim that picks one of a key's rows (a lag)
    level: str = ""  # the staleness level shown, of a row tested at several ('4x')
    intel: str = ""  # the comparison of replication.csv rerun on an Intel CPU, if any
    metric: str = ""  # the primary metric, where the row's basis does not name it
    sweep: str = ""  # the sweeps.yaml entry whose primary_metric the row's first metric is


LINES: tuple[Line, ...] = (
    Line("negative tokens are ~0.80 of the tokens (Fig. 4)", "~0.80", TESTBED,
         "negative_tokens", level="4x", sweep="testbed_grid"),
    Line("failing responses are longer (Fig. 6)", "longer", TESTBED, "negative_longer",
         level="4x", sweep="testbed_grid"),
    Line("staleness raises the clip fraction (Fig. 2)", "rises", TESTBED, "clip_fraction_rises",
         level="4x", sweep="testbed_grid"),
    Line("staleness speeds the entropy fall (Fig. 2)", "faster fall", TESTBED,
         "entropy_falls_faster", level="4x", sweep="testbed_grid"),
    Line("staleness costs, at equal update size and data (Fig. 2)", "costs", BATCH, "reuse",
         sweep="testbed_batch_control"),
    Line("BAPO positive contribution (Fig. 9)", "0.43-0.46", TESTBED, "positive_contribution",
         level="4x", sweep="testbed_grid"),
    Line("bapo beats ppo at 4x (Fig. 11)", FIG11, TESTBED, "bapo_beats_ppo_4x",
         intel="bapo - ppo, paired by seed", sweep="testbed_grid"),
    Line("bapo beats clip_higher at 4x (Fig. 11)", "62.0 vs 59.2", TESTBED,
         "bapo_beats_clip_higher_4x", intel="bapo - clip_higher, paired by seed",
         sweep="testbed_grid"),
    Line("bapo beats ppo at lag 16-19 (Fig. 11)", FIG11, RAMBLE_LAGS, "bapo_beats_ppo",
         where="lag 16-19", sweep="testbed_lags"),
    Line("bapo beats ppo at lag 64-67 (Fig. 11)", FIG11, RAMBLE_LAGS, "bapo_beats_ppo",
         where="lag 64-67", sweep="testbed_lags"),
    Line("bapo beats ppo at lag 64-67, chain sums (Fig. 11)", FIG11, CHAIN_LAGS,
         "bapo_beats_ppo", where="lag 64-67", sweep="lag64"),
    Line("bapo beats ppo at lag 256-259, chain sums (Fig. 11)", FIG11, CHAIN_LAGS,
         "bapo_beats_ppo", where="lag 256-259", sweep="large_lag_peers"),
    Line("bapo beats ppo under experience replay (a setting the paper targets)", "no number",
         CHAIN_LAGS, "bapo_beats_ppo_mixed_ages", where="replay", sweep="scenarios"),
    Line("M2PO matches on-policy at lag 256 (M2PO)", "matches", CHAIN_LAGS,
         "m2po_matches_on_policy", metric="greedy", sweep="m2po_authors"),
    Line("decoupled beats naive ppo (AReaL, Table 3)", "decoupled flat", CHAIN_LAGS,
         "decoupled_beats_naive", where="lag 64-67", sweep="decoupled_areal"),
)
HEADER = ["claim (paper)", "paper", "here (primary metric first)", "verdict",
          "seeds needed (80% power)"]


def claims_row(line: Line, root: Path = ROOT) -> pd.Series:
    """The one row of the line's report that it shows; a clear error when there is none."""
    claims = pd.read_csv(root / line.report, keep_default_na=False)
    found = claims[(claims["key"] == line.key)
                   & claims["claim"].str.contains(line.where, regex=False)]
    found = found[found["verdict"] != "no data"]
    if len(found) != 1:
        raise LookupError(f"{line.report}: {len(found)} judged rows with key {line.key!r} "
                          f"naming {line.where!r}; fix LINES in {__name__}")
    return found.iloc[0]


def estimates(basis: str, level: str = "") -> str:
    """The basis of a row as the README shows it: each metric's estimate, the primary first
    ('sampled (primary) -0.037 ± 0.028 (n=8; 2 of 8 seeds > 0); greedy ...'); of a row
    tested at several levels, the one at `level`."""
    if level:
        parts = [p for p in re.split(r"; (?=\d+x: )", basis) if p.startswith(f"{level}: ")]
        basis = parts[0].removeprefix(f"{level}: ") + f" at {level}" if parts else basis
    shown = []
    for segment in re.split(r"; (?=\w+(?: \(primary\))?: )", basis):
        metric = re.match(r"(\w+(?: \(primary\))?): ", segment)
        found = ESTIMATE.search(segment)
        if not found:
            return basis
        shown.append((f"{metric.group(1)} " if metric else "") + found.group(0)
                     + (f" at {level}" if level and not metric else ""))
    return "; ".join(shown)


def primary_stated_after(sweep: str, root: Path = ROOT) -> bool:
    """Whether sweeps.yaml's `sweep` entry says its primary_metric was stated after the
    runs (its comment on that line); an error naming the entry when it has no such line."""
    current = None
    for text in (root / SWEEPS).read_text().splitlines():
        top = re.match(r"([A-Za-z0-9_]+):", text)
        if top:
            current = top.group(1)
        elif current == sweep and text.strip().startswith("primary_metric:"):
            return AFTER in text
    raise LookupError(f"{SWEEPS}: no primary_metric under {sweep!r}; fix LINES in {__name__}")


def here(row: pd.Series, line: Line, root: Path = ROOT) -> str:
    """What the README says was measured: the estimates (the primary metric marked where
    sweeps.yaml says it was stated after the runs), the cells that do not learn, and the
    Intel rerun of the comparison where the line names one."""
    text = estimates(str(row["basis"]), line.level)
    if line.metric:
        text = f"{line.metric} (primary) {text}"
    if line.sweep and primary_stated_after(line.sweep, root):
        text = text.replace("(primary)", f"(primary, {AFTER})")
    quiet = sorted({m.split(" @ ")[0] for m in NOT_LEARNING.findall(str(row["note"]))})
    if quiet:
        text += f"; {' and '.join(quiet)} {'does' if len(quiet) == 1 else 'do'} not learn"
    if line.intel:
        rerun = pd.read_csv(root / INTEL)
        match = rerun[rerun["family"].str.startswith("GenuineIntel")
                      & (rerun["comparison"] == line.intel)]
        if len(match) == 1:
            text += f"; on an Intel CPU, sampled {match.iloc[0]['sampled (primary)']}"
    return text


def verdict(row: pd.Series) -> str:
    """The raw verdict and, where it differs, the one after Holm; a pilot's seeds; a row
    that holds by construction says so."""
    raw, holm = str(row["verdict"]), str(row["holm_verdict"])
    if str(row["by_construction"]):
        return f"{raw} by construction, not counted"
    if raw == PILOT:
        return pilot_label(int(row["seeds"]))
    return raw if raw == holm else f"{raw}; {holm} after Holm"


def table(root: Path = ROOT) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for line in LINES:
        row = claims_row(line, root)
        cells = [line.claim, line.paper, here(row, line, root), verdict(row),
                 str(row["seeds_needed"])]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def fill(text: str, root: Path = ROOT) -> str:
    """`text` with the table between its markers made afresh."""
    return between_markers(text, START, END, table(root), "claims table")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("readme", nargs="?", type=Path, help="fill this file's table (else print)")
    args = p.parse_args(argv)
    if args.readme is None:
        print(table(), end="")
        return 0
    try:
        text = args.readme.read_text()
        new = readme_microscope.fill(fill(text))
    except (OSError, ValueError, LookupError) as e:
        print(f"readme_table: {e}", file=sys.stderr)
        return 2
    if new != text:
        args.readme.write_text(new)
        print(f"filled {args.readme}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
