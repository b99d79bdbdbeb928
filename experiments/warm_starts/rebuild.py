"""Rebuild the shipped warm starts from scratch and compare their weights, or ship a new one.

    python experiments/warm_starts/rebuild.py                 # every shipped build
    python experiments/warm_starts/rebuild.py 5fb97ee7a8113be3
    python experiments/warm_starts/rebuild.py --eval           # and print the accuracies
    python experiments/warm_starts/rebuild.py --ship task=guess_check   # ship this config's build

Each dir here, `<key>/`, is a warm start as the cache holds it (model and tokenizer saved with
`save_pretrained`, info.json), committed so that every machine starts its runs from the same
weights: a run whose warm-start key has a shipped build loads it and builds nothing
(src/warm_start/). Its info.json records `weights_sha256`, the digest of its
weights at the time it was shipped, and `numerics`, the fingerprint of the machine that built
them.

A rebuild trains the build again from its info.json (task, model and SFT configs, seed) in
this process's numerics mode (src/_numerics.py; portable unless `numerics=native` is given)
into a temporary dir and compares its digest with the reference of this machine's numerics
family (`numerics_family`: CPU vendor, ISA, the MKL branch in effect): the shipped digest on
the family that shipped it, else the one `--record` stored in info.json's
`rebuilt_weights_sha256` after a rebuild on that family. MKL runs another branch on AMD than
on Intel, so the two families build weights that differ in the last bits (docs/numerics.md):
the promise is bit for bit within a family, and each family's digest is recorded once.

    python experiments/warm_starts/rebuild.py --record        # store this family's digests

A prefix rebuild, `--steps K`, trains the first K SFT steps of the same schedule (about K/350
of a rebuild) and compares the weights after step K with this family's prefix reference
(`rebuilt_prefix_sha256[family][K]`), and the digest of every step's batch, all of them,
with `sft_data_sha256` (the same on every machine). The test suite rebuilds one build whole
and the other two by prefix: the SFT code is one loop for all three, so the whole rebuild
checks it to its last step, and the prefixes check each build's own data, tokenizer and
model to step K. What a prefix leaves unchecked is a rounding that only a later step of
that build's own data would show. `--record --steps K` stores the prefix references.

Exit codes: 0 every digest equal (or recorded, or the build shipped); 1 a digest differs;
2 bad input; 3 no reference for this machine's family (run with --record to store one).
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


def reference_digest(info: dict, family: str) -> str | None:
    """The digest a rebuild on `family` must give: the shipped one where that family shipped
    it, else the one recorded by a rebuild there, else None."""
    from src._numerics import numerics_family

    if numerics_family(info["numerics"]) == family:
        return info["weights_sha256"]
    return info.get("rebuilt_weights_sha256", {}).get(family)


def prefix_reference(info: dict, family: str, steps: int) -> str | None:
    """The digest of the weights after SFT step `steps` that a prefix rebuild on `family` must
    give, recorded by `--record --steps`, else None."""
    return info.get("rebuilt_prefix_sha256", {}).get(family, {}).get(str(steps))


def rebuild(entry: Path, scratch: Path, *, evaluate_after: bool = False,
            stop_after: int | None = None) -> dict:
    """The shipped build in `entry` trained again: its digest (and its accuracies where
    `evaluate_after`; the eval is about a tenth of a rebuild and the digest needs none of it).
    With `stop_after=K`, the first K SFT steps only, and `sft_data_sha256`, the digest of
    every step's batch."""
    from src._numerics import active_mode
    from src.tasks import get_task
    from src.warm_start import build, resolve_configs
    from src.warm_start.sft import data_digest

    info = json.loads((entry / "info.json").read_text())
    task_cfg = dict(info["task"])
    task = get_task(task_cfg.pop("name"), **task_cfg)
    m_cfg, s_cfg = resolve_configs(info["model"], info["sft"])
    _, tokenizer, built = build(task, m_cfg, s_cfg, scratch / entry.name,
                                seed=int(info["seed"]), progress=False, device="cpu",
                                autocast=None, numerics=active_mode(),
                                evaluate_after=evaluate_after and stop_after is None,
                                stop_after=stop_after)
    if stop_after is not None:
        built["sft_data_sha256"] = data_digest(tokenizer, task, s_cfg)
    return built


def compare(info: dict, built: dict, family: str, stop_after: int | None,
            record: bool) -> tuple[str, str]:
    """(outcome, the line's words): outcome is "identical", "differs", "recorded" or
    "unreferenced"; with `record`, a missing reference is stored in `info` (the caller
    writes it)."""
    rebuilt = built["weights_sha256"]
    if stop_after is None:
        reference, where = reference_digest(info, family), f"{family} reference"
    else:
        reference = prefix_reference(info, family, stop_after)
        where = f"first {stop_after} of {info['sft']['steps']} SFT steps, {family} reference"
    data = ""
    if stop_after is not None:
        data_ref, data_now = info.get("sft_data_sha256"), built["sft_data_sha256"]
        if data_ref is None and record:
            info["sft_data_sha256"] = data_ref = data_now
        if data_ref is None:
            return "unreferenced", (f"{where} {reference}, rebuilt {rebuilt}; every step's data "
                                    f"has no sft_data_sha256 (run with --record to store "
                                    f"{data_now})")
        data = (f"; every step's data {data_ref}, rebuilt {data_now}: "
                f"{'identical' if data_ref == data_now else 'DIFFERS'}")
        if data_ref != data_now:
            return "differs", f"{where} {reference}, rebuilt {rebuilt}{data}"
    if reference is None and record:
        if stop_after is None:
            info.setdefault("rebuilt_weights_sha256", {})[family] = rebuilt
        else:
            info.setdefault("rebuilt_prefix_sha256", {}).setdefault(family, {})[
                str(stop_after)] = rebuilt
        return "recorded", f"{where} {rebuilt}: recorded{data}"
    if reference is None:
        return "unreferenced", (f"{where} none, rebuilt {rebuilt}: no reference for {family} "
                                f"(run with --record to store this one){data}")
    verdict = "identical" if reference == rebuilt else "DIFFERS"
    return ("identical" if reference == rebuilt else "differs"), (
        f"{where} {reference}, rebuilt {rebuilt}: {verdict}{data}")


def ship(overrides: list[str]) -> Path:
    """Build the warm start of the config these overrides compose and copy it here."""
    from src.build import compose_config
    from src.tasks import get_task
    from src.warm_start import warm_start

    cfg = compose_config(overrides)
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
    parser.add_argument("--record", action="store_true",
                        help="store each rebuilt digest as this numerics family's reference "
                             "in info.json where it has none")
    parser.add_argument("--eval", action="store_true",
                        help="also evaluate each rebuilt model and print its accuracies beside "
                             "the shipped ones (about a tenth more time)")
    parser.add_argument("--steps", type=int, metavar="K",
                        help="rebuild the first K SFT steps only, and check every step's data")
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
    from src._numerics import fingerprint, numerics_family

    infos = {k: json.loads((HERE / k / "info.json").read_text()) for k in keys}
    if args.steps is not None:
        too_long = [k for k, info in infos.items()
                    if not 1 <= args.steps <= int(info["sft"]["steps"])]
        if too_long:
            lengths = ", ".join(f"{k}: {infos[k]['sft']['steps']}" for k in too_long)
            print(f"--steps {args.steps}: give 1 to the SFT's steps ({lengths})", file=sys.stderr)
            raise SystemExit(2)
    family = numerics_family(fingerprint())
    outcomes = []
    with tempfile.TemporaryDirectory() as tmp:
        for key in keys:
            info = infos[key]
            as_read = json.dumps(info, sort_keys=True)
            built = rebuild(HERE / key, Path(tmp), evaluate_after=args.eval,
                            stop_after=args.steps)
            outcome, words = compare(info, built, family, args.steps, args.record)
            if json.dumps(info, sort_keys=True) != as_read:  # --record stored a reference
                (HERE / key / "info.json").write_text(json.dumps(info, indent=2, sort_keys=True)
                                                      + "\n")
            accuracy = ("; " + (f"greedy {info['greedy_accuracy']:.3f} -> {built['greedy_accuracy']:.3f}, "
                                f"sampled {info['sampled_accuracy']:.3f} -> "
                                f"{built['sampled_accuracy']:.3f}")
                        if args.eval and args.steps is None else "")
            print(f"{key}: {words} (shipped {info['weights_sha256']}{accuracy})", flush=True)
            outcomes.append(outcome)
    raise SystemExit(1 if "differs" in outcomes else 3 if "unreferenced" in outcomes else 0)

if __name__ == "__main__":
    main()
