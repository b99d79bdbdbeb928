"""The report of a microscope study: claims judged, Insight 2 measured, figures.

    python analysis/microscope_report.py --studies experiments/microscope/smol_4x \\
        --sweep microscope_smol --out figures/microscope

`--studies`: dirs holding study dirs (each with microscope.yaml); `--sweep`: the
experiments/sweeps.yaml entry whose `claims` (written before the study ran) are judged.
Bad options exit 2 with one line before any work.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from src.config_fields import config_exit  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", nargs="+", type=Path, required=True)
    parser.add_argument("--sweep", default="microscope_smol")
    parser.add_argument("--sweeps-file", type=Path, default=ROOT / "experiments" / "sweeps.yaml")
    parser.add_argument("--out", type=Path, default=Path("figures/microscope"))
    parser.add_argument("--formats", nargs="+", default=["png"])
    args = parser.parse_args(argv)
    from analysis.claims.microscope import parse_claims
    from analysis.reports.microscope import find_studies, write_report

    missing = [str(p) for p in args.studies if not p.is_dir()]
    if missing:
        config_exit(f"--studies: {missing} is not a dir")
    if not find_studies(args.studies):
        config_exit(f"--studies: no study (a dir with microscope.yaml) under {args.studies}")
    sweeps = yaml.safe_load(args.sweeps_file.read_text())
    claims = (sweeps.get(args.sweep) or {}).get("claims")
    if not claims:
        config_exit(f"--sweep: {args.sweep!r} in {args.sweeps_file} declares no `claims`")
    holdout = (sweeps.get(args.sweep) or {}).get("holdout") or []
    try:  # every claim row, holdout check and expectation check, before any table is read
        parse_claims(claims)
        parse_claims(holdout)
    except ValueError as e:
        config_exit(f"--sweep {args.sweep}: {e}")
    parts = (sweeps.get(args.sweep) or {}).get("parts")
    path = write_report(args.studies, claims, args.out, formats=args.formats, holdout=holdout,
                        parts=parts)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
