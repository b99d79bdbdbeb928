"""Rebuild the shipped warm starts from scratch and compare their weights, or ship a new one.

    python experiments/warm_starts/rebuild.py                 # every shipped build
    python experiments/warm_starts/rebuild.py 5fb97ee7a8113be3
    python experiments/warm_starts/rebuild.py --ship task=guess_check   # ship this config's build

Each dir here, `<key>/`, is a warm start as the cache holds it (model and tokenizer saved with
`save_pretrained`, info.json), committed so that every machine starts its runs from the same
weights: a run whose warm-start key has a shipped build loads it and builds nothing
(src/warm_start/). Its info.json records `weights_sha256`, the digest of its
weights at the time it was shipped.

A rebuild trains the build again from its info.json (task, model and SFT configs, seed) in
this process's numerics mode (src/_numerics.py; portable unless `numerics=native` is given)
into a temporary dir and compares the digests. In portable mode on an x86-64 CPU with AVX2
they must be equal; elsewhere a difference is expected and says which CPU rounds otherwise.

Exit codes: 0 every digest equal (or the build shipped); 1 a digest differs; 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from src.pinning import pin_process  # noqa: E402

pin_process()  # the numerics mode, before torch loads

HERE = Path(__file__).resolve().parent


def shipped_keys() -> list[str]:
    return sorted(p.parent.name for p in HERE.glob("*/info.json"))


def rebuild(entry: Path, scratch: Path) -> tuple[str, str]:
    """(the shipped digest, the rebuilt one) of the shipped build in `entry`."""
    from src._numerics import active_mode
    from src.tasks import get_task
    from src.warm_start import build, resolve_configs

    info = json.loads((entry / "info.json").read_text())
    task_cfg = dict(info["task"])
    task = get_task(task_cfg.pop("name"), **task_cfg)
    m_cfg, s_cfg = resolve_configs(info["model"], info["sft"])
    _, _, built = build(task, m_cfg, s_cfg, scratch / entry.name, seed=int(info["seed"]),
                        progress=False, device="cpu", autocast=None, numerics=active_mode())
    return info["weights_sha256"], built["weights_sha256"]


def ship(overrides: list[str]) -> Path:
    """Build the warm start of the config these overrides compose and copy it here."""
    from hydra import compose, initialize_config_dir

    from src.config import validate
    from src.tasks import get_task
    from src.warm_start import warm_start

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = validate(compose(config_name="config", overrides=overrides))
    if cfg.model.kind != "tiny":
        raise SystemExit("--ship: only tiny models have a warm start (model.kind=tiny)")
    task = get_task(cfg.task.name, **dict(cfg.task.params))
    with tempfile.TemporaryDirectory() as tmp:
        _, _, info = warm_start(task, dict(cfg.model.architecture), dict(cfg.model.sft), Path(tmp),
                                seed=cfg.model.warm_start_seed, progress=True,
                                numerics=cfg.numerics, shipped_dir=None)
        entry = HERE / info["key"]
        if entry.exists():
            raise SystemExit(f"--ship: {entry} is already shipped; rebuild it to check it")
        shutil.copytree(info["path"], entry)
    stored = json.loads((entry / "info.json").read_text())
    stored["weights_sha256"] = info["weights_sha256"]
    (entry / "info.json").write_text(json.dumps(stored, indent=2, sort_keys=True) + "\n")
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("keys", nargs="*", help="shipped keys to rebuild (default: all)")
    parser.add_argument("--ship", nargs="*", metavar="OVERRIDE",
                        help="build and ship the warm start of this config (Hydra overrides)")
    args = parser.parse_args()
    # `numerics=native` on the command line was read when torch loaded (src/_numerics.py)
    mode = [a for a in args.keys if a.startswith("numerics=")]
    if args.ship is not None:
        entry = ship(args.ship + mode)
        print(f"shipped {entry.relative_to(REPO)}")
        return
    keys = [k for k in args.keys if k not in mode] or shipped_keys()
    unknown = [k for k in keys if not (HERE / k / "info.json").is_file()]
    if unknown:
        print(f"no shipped warm start {', '.join(unknown)}; shipped: {', '.join(shipped_keys())}",
              file=sys.stderr)
        raise SystemExit(2)
    differ = 0
    with tempfile.TemporaryDirectory() as tmp:
        for key in keys:
            shipped, rebuilt = rebuild(HERE / key, Path(tmp))
            same = shipped == rebuilt
            differ += not same
            print(f"{key}: shipped {shipped}, rebuilt {rebuilt}: "
                  f"{'identical' if same else 'DIFFERS'}", flush=True)
    raise SystemExit(1 if differ else 0)


if __name__ == "__main__":
    main()
