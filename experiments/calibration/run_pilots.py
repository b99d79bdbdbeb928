"""Run the testbed-calibration pilots of pilots.yaml, one after another, and export them.

    python experiments/calibration/run_pilots.py D1 D2        # these pilots (all their seeds)
    python experiments/calibration/run_pilots.py --all         # every pilot not yet exported
    python experiments/calibration/run_pilots.py --list

Each pilot is a list of overrides on top of `common` (pilots.yaml; a pilot with `common: false`
takes its overrides alone) and runs once per seed in
runs/calibration/<pilot>/seed<N>/. A finished run is exported to
experiments/calibration/runs/<pilot>/seed<N>/ (config, meta, status, and the metrics as
metrics.jsonl.gz, as experiments/export_results.py keeps them; no token rows, no
checkpoints), which is what summarize.py reads and what is committed, so a session that ends
loses no finished pilot. Exported pilots are skipped; those exported before keep a plain
metrics.jsonl, read the same (src/run_files.py).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
if str(REPO) not in sys.path:  # run as a script, only experiments/calibration is there
    sys.path.insert(0, str(REPO))

from src.run_files import METRICS, write_metrics_gz  # noqa: E402 - after the path above

KEPT = ("config.yaml", "meta.json", "status.json")  # copied as they are; the metrics gzipped


def load_pilots() -> tuple[list[str], dict[str, dict]]:
    spec = yaml.safe_load((HERE / "pilots.yaml").read_text())
    return list(spec["common"]), dict(spec["pilots"])


def cells(pilots: dict[str, dict], names: list[str]) -> list[tuple[str, int]]:
    unknown = [n for n in names if n not in pilots]
    if unknown:
        raise SystemExit(f"unknown pilot(s) {unknown}; see --list")
    return [(n, s) for n in names for s in pilots[n].get("seeds", [0])]


def exported(name: str, seed: int) -> Path:
    return HERE / "runs" / name / f"seed{seed}"


def run_cell(common: list[str], pilot: dict, name: str, seed: int) -> int:
    run_dir = REPO / "runs" / "calibration" / name / f"seed{seed}"
    # `common: false`: a pilot of another testbed, whose overrides are its whole command
    shared = common if pilot.get("common", True) else []
    cmd = [sys.executable, "-m", "src.run", *shared, *pilot["overrides"], f"seed={seed}",
           "logger.progress=false", f"hydra.run.dir={run_dir}"]
    print("$", " ".join(cmd[1:]), flush=True)
    rc = subprocess.run(cmd, cwd=REPO).returncode
    if rc == 0 and (run_dir / "status.json").read_text().find('"finished"') >= 0:
        out = exported(name, seed)
        out.mkdir(parents=True, exist_ok=True)
        for f in KEPT:
            shutil.copy2(run_dir / f, out / f)
        (out / METRICS).unlink(missing_ok=True)  # an older export's plain copy: one form only
        write_metrics_gz(run_dir, out)
    return rc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pilots", nargs="*")
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    common, pilots = load_pilots()
    if args.list:
        for name, p in pilots.items():
            done = sum(exported(name, s).exists() for s in p.get("seeds", [0]))
            print(f"{name:28s} {done}/{len(p.get('seeds', [0]))} done  {p['question']}")
        return
    todo = [c for c in cells(pilots, list(pilots) if args.all else args.pilots)
            if not exported(*c).exists()]
    for name, seed in todo:
        if "overrides" not in pilots[name]:  # a measurement, not a training run
            print(f"{name}: not a training run; run `python {pilots[name]['script']}`")
            continue
        rc = run_cell(common, pilots[name], name, seed)
        if rc != 0:
            print(f"pilot {name} seed {seed} exited {rc}", file=sys.stderr)


if __name__ == "__main__":
    main()
