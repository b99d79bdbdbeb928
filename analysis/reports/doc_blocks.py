"""Blocks of a doc generated from a report's CSVs, so the doc quotes what the report says.

A doc marks each block it wants filled:

    <!-- generated: claims (figures) -->
    ...                          (replaced on every fill)
    <!-- /generated: claims -->

`claims` is the main suite's claims with their raw and Holm verdicts and counts, `results`
its cells' final accuracy, entropy drift and clip fractions, `search` how BAPO's search
ended over the stale updates (all from figures/claims.csv, results.csv, claim_counts.csv,
bapo_search.csv). analysis/make_figures.py fills the docs named by `--docs` after it writes
the report (the blocks that name its --out dir); by hand, every block:

    python analysis/reports/doc_blocks.py docs/reproduction.md

tests/analysis/test_doc_blocks.py checks that the committed docs' blocks are what the
committed report gives.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd

if __package__ in (None, ""):  # run as a script: make `analysis` importable from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from analysis.claims.distance import COLUMN as SEEDS_NEEDED  # noqa: E402
from analysis.claims.distance import HEADING as SEEDS_HEADING  # noqa: E402
from analysis.claims.rules import VERDICTS  # noqa: E402
from analysis.core.multiplicity import PILOT, fmt_p, pilot_label  # noqa: E402
from analysis.core.stats import fmt_ci  # noqa: E402
from analysis.core.style import staleness_label  # noqa: E402
from analysis.reports.markdown import by_construction  # noqa: E402

BLOCK = re.compile(r"(<!-- generated: (\w+) \(([^)]*)\) -->\n)(.*?)(<!-- /generated: \2 -->)",
                   re.DOTALL)
RESULT_METRICS = {"final_sampled_acc": "final sampled acc", "final_greedy_acc": "final greedy acc",
                  "entropy_drift": "entropy drift", "clip_frac": "clip frac",
                  "grad_clip_share": "grad-norm clipped"}
SEARCH_OUTCOMES = ["at start", "moved, reached", "not reached", "undefined"]


def _table(df: pd.DataFrame) -> str:
    rows = df.astype(str).map(lambda v: v.replace("|", "\\|"))
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows.itertuples(index=False)])


def _main_suite(report: Path) -> tuple[str, pd.Series]:
    """The first suite of claim_counts.csv (the largest, S1) and its counts row."""
    counts = pd.read_csv(report / "claim_counts.csv")
    row = counts.iloc[0]
    return str(row["suite"]), row


def _counts(row: pd.Series, holm: bool) -> str:
    kinds = list(VERDICTS)
    cols = [f"{k} (Holm)" if holm else k for k in kinds]
    text = ", ".join(f"{int(row[c])} {k}" for c, k in zip(cols, kinds, strict=True) if row[c])
    built = int(row.get("by construction", 0) or 0)
    return text + (f"; {built} by construction (shown, not counted)" if built else "")


def claims_block(report: Path) -> str:
    suite, row = _main_suite(report)
    claims = pd.read_csv(report / "claims.csv", keep_default_na=False)
    main = claims[claims["suite"] == suite]
    tests = int(main["tests"].iloc[0]) if len(main) else 0
    p = pd.to_numeric(main["p"], errors="coerce")
    holm = pd.to_numeric(main["holm_p"], errors="coerce")
    table = pd.DataFrame({
        "claim": main["claim"], "paper": main["paper"], "ours (95% interval)": main["basis"],
        "verdict": [f"{v} (by construction)" if b else pilot_label(n) if v == PILOT else v
                    for v, b, n in zip(main["verdict"], by_construction(main), main["seeds"],
                                       strict=True)],
        "after Holm": ["by construction" if b else pilot_label(n) if v == PILOT else
                       f"{v} (p {fmt_p(a)}, Holm {fmt_p(q)})"
                       for v, a, q, b, n in zip(main["holm_verdict"], p, holm,
                                                by_construction(main), main["seeds"],
                                                strict=True)],
        SEEDS_HEADING: main[SEEDS_NEEDED]})
    return (f"{int(row['total'])} claims counted (suite S1 of the report): {_counts(row, False)}; "
            f"after Holm's correction over the {tests} tested rows: {_counts(row, True)}.\n\n"
            + _table(table) + "\n")


def results_block(report: Path) -> str:
    suite, _ = _main_suite(report)
    r = pd.read_csv(report / "results.csv")
    r = r[(r["suite"] == suite) & r["metric"].isin(RESULT_METRICS)]
    r = r.assign(text=[fmt_ci(m, lo, hi, int(n)) for m, lo, hi, n in
                       r[["mean", "ci_low", "ci_high", "n"]].itertuples(index=False)])
    keys = ["experiment", "method", "staleness"]
    wide = r.pivot_table(index=keys, columns="metric", values="text", aggfunc="first", sort=False)
    wide = wide[[m for m in RESULT_METRICS if m in wide.columns]].rename(columns=RESULT_METRICS)
    wide = wide.reset_index().drop(columns="experiment")
    wide["staleness"] = wide["staleness"].map(staleness_label)
    return _table(wide) + "\n"


def search_block(report: Path) -> str:
    suite, _ = _main_suite(report)
    path = report / "bapo_search.csv"
    if not path.is_file():
        return "No run of this report searches its bounds.\n"
    s = pd.read_csv(path)
    s = s[(s["suite"] == suite) & s["updates"].str.startswith("1..")]
    shown = s[["method", "staleness", "n", *SEARCH_OUTCOMES]].copy()
    shown["staleness"] = shown["staleness"].map(staleness_label)
    for o in SEARCH_OUTCOMES:
        shown[o] = shown[o].map(lambda v: f"{v:.3f}")
    return _table(shown.rename(columns={"n": "stale updates"})) + "\n"


BLOCKS: dict[str, Callable[[Path], str]] = {
    "claims": claims_block, "results": results_block, "search": search_block}


def fill(text: str, root: Path, only: Path | None = None) -> str:
    """`text` with its generated blocks rendered afresh from the report dir each names
    (relative to `root`, the repo); with `only`, just the blocks that name that dir."""
    def render(m: re.Match) -> str:
        name, report = m.group(2), (root / m.group(3)).resolve()
        if name not in BLOCKS:
            raise ValueError(f"unknown generated block {name!r} (known: {', '.join(BLOCKS)})")
        if only is not None and report != only.resolve():
            return m.group(0)
        return m.group(1) + BLOCKS[name](report) + m.group(5)

    return BLOCK.sub(render, text)


def fill_docs(docs: list[Path], root: Path, only: Path | None = None) -> list[Path]:
    """Rewrite each doc whose blocks changed; the docs rewritten."""
    changed = []
    for doc in docs:
        text = doc.read_text()
        new = fill(text, root, only)
        if new != text:
            doc.write_text(new)
            changed.append(doc)
    return changed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("docs", nargs="+", type=Path)
    p.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2],
                   help="the dir the blocks' report paths are relative to (the repo)")
    args = p.parse_args(argv)
    for doc in fill_docs(args.docs, args.root):
        print(f"filled {doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
