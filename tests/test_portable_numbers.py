"""The promise that a reviewer can check a committed number: the shipped warm starts are what
their info.json says and rebuild to the same weights, and a short run from the shipped
default gives the committed metrics, bit for bit, on every machine of a numerics family
(src/_numerics.py numerics_family: CPU vendor, ISA, MKL's branch in effect) in the portable
mode. MKL runs another branch on AMD than on Intel, so each family has its own reference,
recorded once on it; a family with none is skipped and says how to record one. A mismatch
within a family is a real break: the test names both fingerprints."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from src._numerics import active_mode, cpu_model_and_flags, fingerprint, numerics_family
from src.tasks import get_task
from src.warm_start import SHIPPED_DIR, cache_key, resolve_configs, weights_digest
from tests.conftest import REPO

SHIPPED = sorted(p.parent for p in SHIPPED_DIR.glob("*/info.json"))
# 3-step runs of the quick start's main job, made in the portable mode, one per numerics
# family: each dir's metrics.jsonl and the meta.json fields a rerun needs (overrides, the
# fingerprint of the CPU that made it). portable_run/ came from an AMD EPYC.
COMMITTED = sorted((REPO / "tests" / "data").glob("portable_run*/meta.json"))
covered = pytest.mark.skipif(
    active_mode() != "portable" or "avx2" not in cpu_model_and_flags()[1],
    reason="the bit-for-bit promise covers x86-64 CPUs with AVX2 in the portable numerics mode")


def _task(info: dict):
    cfg = dict(info["task"])
    return get_task(cfg.pop("name"), **cfg)


def test_the_default_warm_start_is_shipped():
    assert "5fb97ee7a8113be3" in [p.name for p in SHIPPED]


@pytest.mark.parametrize("experiment", ["ramble_1x", "ramble_2x", "ramble_4x", "ramble_delay_4",
                                        "ramble_delay_16"])
def test_the_ramble_testbeds_runs_start_from_its_shipped_build(experiment):
    # experiments/testbed_grid's runs recorded weights d6a72f2d491dc6b2; a change to the task,
    # model or SFT of these configs would move them to an unshipped build, unseen
    from tests.conftest import compose

    cfg = compose([f"experiment={experiment}"])
    task = get_task(cfg.task.name, **dict(cfg.task.params))
    m_cfg, s_cfg = resolve_configs(dict(cfg.model.architecture), dict(cfg.model.sft))
    key = cache_key(task, m_cfg, s_cfg, cfg.model.warm_start_seed, numerics=cfg.numerics)
    assert key == "dd719a6a579f7725"
    assert json.loads((SHIPPED_DIR / key / "info.json").read_text())["weights_sha256"][:16] == (
        "d6a72f2d491dc6b2")


@pytest.mark.parametrize("entry", SHIPPED, ids=[p.name for p in SHIPPED])
def test_each_shipped_build_is_what_its_info_says(entry):
    info = json.loads((entry / "info.json").read_text())
    assert weights_digest(entry) == info["weights_sha256"]
    m_cfg, s_cfg = resolve_configs(info["model"], info["sft"])
    # the dir name is the key runs compute, so a run with this config loads it
    assert cache_key(_task(info), m_cfg, s_cfg, info["seed"]) == entry.name == info["key"]
    assert info["numerics"]["mode"] == "portable" and info["numerics"]["isa"] == "AVX2"


# The build rebuilt whole: the ramble testbed's, the one the lead grids start from. The SFT
# is one loop for all three builds, so this checks it to its last step; the other two are
# rebuilt for their first PREFIX_STEPS steps (past the 35-step warmup) with every step's data
# digested, which checks their own data, tokenizer and model at about a seventh of the cost
# (experiments/warm_starts/rebuild.py --steps; `rebuild.py` alone rebuilds all three whole).
# Prefix references are recorded per numerics family (`--record --steps 50`); a family with
# none rebuilds all three whole.
WHOLE = "dd719a6a579f7725"
PREFIX_STEPS = 50


@pytest.mark.slow
@covered
@pytest.mark.parametrize("entry", SHIPPED, ids=[p.name for p in SHIPPED])
def test_each_shipped_build_rebuilds_bit_for_bit(entry):
    info = json.loads((entry / "info.json").read_text())
    from experiments.warm_starts.rebuild import prefix_reference, reference_digest

    family = numerics_family(fingerprint())
    # a family with a whole reference and no prefix one (the shipping AMD family) rebuilds
    # whole, as before, rather than skip the check
    whole = entry.name == WHOLE or prefix_reference(info, family, PREFIX_STEPS) is None
    args = [] if whole else ["--steps", str(PREFIX_STEPS)]
    reference = (reference_digest(info, family) if whole
                 else prefix_reference(info, family, PREFIX_STEPS))
    if reference is None:
        pytest.skip(f"no reference digest for {family}: experiments/warm_starts/rebuild.py "
                    f"{entry.name} {' '.join(args)} --record stores one")
    # The build inherits the session's passive wait policy (tests/conftest.py): it shares the
    # cores with the suite's other worker. The wait policy changes no digest (checked).
    out = subprocess.run([sys.executable, "experiments/warm_starts/rebuild.py", entry.name, *args],
                         cwd=REPO, capture_output=True, text=True, timeout=1800)
    shipped_by = info["numerics"]
    assert out.returncode == 0, (f"{out.stdout}{out.stderr[-2000:]}\nthis machine: "
                                 f"{json.dumps(fingerprint())}\nshipped by: {json.dumps(shipped_by)}")
    line = next(x for x in out.stdout.splitlines() if x.startswith(f"{entry.name}: "))
    if whole:
        assert f"{family} reference {reference}, rebuilt {reference}: identical" in line
    else:
        assert (f"first {PREFIX_STEPS} of {info['sft']['steps']} SFT steps, {family} reference {reference}, "
                f"rebuilt {reference}: identical") in line
        data = info["sft_data_sha256"]
        assert f"every step's data {data}, rebuilt {data}: identical" in line


def test_the_prefix_rebuilds_have_their_data_digest_recorded():
    # every build a prefix checks has the digest of all its SFT steps' data, which is the same
    # on every machine, so a prefix rebuild never skips that half
    for entry in SHIPPED:
        if entry.name != WHOLE:
            info = json.loads((entry / "info.json").read_text())
            assert len(info["sft_data_sha256"]) == 16, entry.name


@pytest.mark.slow
@covered
def test_a_short_run_from_the_shipped_warm_start_gives_the_committed_numbers(tmp_path):
    """Every number training uses, record by record (experiments/verify_cell.py's
    comparison). The sampler's own log-probs are left out: a diagnostic that training never
    reads, and the one thing that still differed in the last bits between two x86-64 CPUs
    in this mode (docs/numerics.md)."""
    from experiments.verify_cell import SAMPLER_RECORD_KEYS, compare_metrics

    family = numerics_family(fingerprint())
    same_family = [m.parent for m in COMMITTED
                   if numerics_family(json.loads(m.read_text())["numerics"]) == family]
    if not same_family:
        pytest.skip(f"no committed short run for {family}: run the overrides of "
                    "tests/data/portable_run/meta.json and commit its metrics.jsonl and meta "
                    "fields as tests/data/portable_run_<family>/")
    reference = same_family[0]
    expected = json.loads((reference / "meta.json").read_text())
    run_dir = tmp_path / "run"
    env = {**os.environ, "WANDB_MODE": "disabled"}
    cmd = [sys.executable, "-m", "src.run", *expected["overrides"], f"cache_dir={tmp_path / 'cache'}",
           f"hydra.run.dir={run_dir}"]
    subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800, check=True)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["warm_start"].startswith(str(SHIPPED_DIR))  # loaded, not built
    assert meta["warm_start_weights"] == expected["warm_start_weights"]
    assert not (tmp_path / "cache" / "warm_start").exists()
    problems = compare_metrics(reference, run_dir, skip=SAMPLER_RECORD_KEYS)
    assert problems == [], (
        "this CPU rounds otherwise: " + "; ".join(problems)
        + f"\nthis machine: {json.dumps(meta['numerics'])}"
        + f"\ncommitted by: {json.dumps(expected['numerics'])}")


@pytest.mark.parametrize(("fp", "family"), [
    ({"cpu_model": "AMD EPYC", "isa": "AVX2", "mkl_branch": "AVX2"}, "AuthenticAMD/AVX2/MKL AUTO"),
    ({"cpu_vendor": "AuthenticAMD", "cpu_model": "x", "isa": "AVX2", "mkl_branch": "AVX2"},
     "AuthenticAMD/AVX2/MKL AUTO"),
    ({"cpu_vendor": "GenuineIntel", "cpu_model": "Intel(R) Xeon(R) Processor", "isa": "AVX2",
      "mkl_branch": "AVX2"}, "GenuineIntel/AVX2/MKL AVX2"),
    ({"cpu_model": "Intel(R) Xeon(R) Processor", "isa": "AVX512", "mkl_branch": None},
     "GenuineIntel/AVX512/MKL None"),
])
def test_the_numerics_family_follows_mkls_branch_in_effect(fp, family):
    # MKL honours MKL_CBWR=AVX2 on Intel only; on AMD it runs AUTO (oneMKL's developer guide)
    assert numerics_family(fp) == family


def test_each_committed_reference_is_of_its_own_family():
    families = [numerics_family(json.loads(m.read_text())["numerics"]) for m in COMMITTED]
    assert len(families) == len(set(families)) and "AuthenticAMD/AVX2/MKL AUTO" in families


FAMILY = "GenuineIntel/AVX2/MKL AVX2"
SHIPPED_BY = {"cpu_model": "AMD EPYC", "isa": "AVX2", "mkl_branch": "AVX2"}


def _info(**more) -> dict:
    return {"numerics": SHIPPED_BY, "weights_sha256": "shipped", "sft": {"steps": 350}, **more}


@pytest.mark.parametrize(("info", "built", "steps", "record", "outcome", "stored"), [
    # a whole rebuild against this family's recorded digest
    (_info(rebuilt_weights_sha256={FAMILY: "w"}), {"weights_sha256": "w"}, None, False,
     "identical", None),
    (_info(rebuilt_weights_sha256={FAMILY: "w"}), {"weights_sha256": "v"}, None, False,
     "differs", None),
    (_info(), {"weights_sha256": "w"}, None, False, "unreferenced", None),
    (_info(), {"weights_sha256": "w"}, None, True, "recorded",
     ("rebuilt_weights_sha256", {FAMILY: "w"})),
    # a prefix: its weights after step K and every step's data must both agree
    (_info(rebuilt_prefix_sha256={FAMILY: {"50": "p"}}, sft_data_sha256="d"),
     {"weights_sha256": "p", "sft_data_sha256": "d"}, 50, False, "identical", None),
    (_info(rebuilt_prefix_sha256={FAMILY: {"50": "p"}}, sft_data_sha256="d"),
     {"weights_sha256": "p", "sft_data_sha256": "e"}, 50, False, "differs", None),
    (_info(rebuilt_prefix_sha256={FAMILY: {"50": "p"}}, sft_data_sha256="d"),
     {"weights_sha256": "q", "sft_data_sha256": "d"}, 50, False, "differs", None),
    # a prefix of another length has no reference, even where 50 has one
    (_info(rebuilt_prefix_sha256={FAMILY: {"50": "p"}}, sft_data_sha256="d"),
     {"weights_sha256": "p", "sft_data_sha256": "d"}, 40, False, "unreferenced", None),
    (_info(sft_data_sha256="d"), {"weights_sha256": "p", "sft_data_sha256": "d"}, 50, True,
     "recorded", ("rebuilt_prefix_sha256", {FAMILY: {"50": "p"}})),
    # data never recorded: unreferenced, and --record stores it beside the prefix digest
    (_info(rebuilt_prefix_sha256={FAMILY: {"50": "p"}}),
     {"weights_sha256": "p", "sft_data_sha256": "d"}, 50, False, "unreferenced", None),
    # data never recorded: --record stores it beside the prefix digest
    (_info(), {"weights_sha256": "p", "sft_data_sha256": "d"}, 50, True, "recorded",
     ("sft_data_sha256", "d")),
])
def test_a_rebuild_is_judged_against_its_familys_reference(info, built, steps, record, outcome,
                                                           stored):
    from experiments.warm_starts.rebuild import compare

    got, words = compare(info, built, FAMILY, steps, record)
    assert got == outcome, words
    if stored is not None:
        assert info[stored[0]] == stored[1]
    if outcome == "differs":
        assert "DIFFERS" in words
