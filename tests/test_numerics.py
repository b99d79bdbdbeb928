"""The numerics mode: the CPU instruction set pinned before torch loads (portable), or not
(native); the user's own settings win; the config cannot disagree with the loaded mode;
the fingerprint says what ran; a native warm start never takes a portable build's key."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# src.config reads its `numerics` default from the process's mode when it is imported,
# which must happen before the tests below call pin_numerics on fake environments.
import src.config  # noqa: F401
from src._numerics import ENV_MODE, ENV_PINNED, PORTABLE_PINS, cpu_model_and_flags, pin_numerics
from src.config_fields import ConfigError
from tests.conftest import REPO, compose


@pytest.fixture(autouse=True)
def _keep_the_process_mode():
    """pin_numerics records its choice in a module global; the tests here call it on fake
    environments, so the process's own record is put back after each."""
    from src import _numerics

    saved = dict(_numerics.CHOICE)
    yield
    _numerics.CHOICE.clear()
    _numerics.CHOICE.update(saved)


def test_portable_pins_every_library_to_avx2_on_x86():
    env: dict[str, str] = {}
    choice = pin_numerics([], env, machine="x86_64")
    assert env == {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                   ENV_MODE: "portable", ENV_PINNED: "ATEN_CPU_CAPABILITY,MKL_CBWR,ONEDNN_MAX_CPU_ISA"}
    assert choice["mode"] == "portable" and choice["source"] == "default"
    assert choice["pinned"] == PORTABLE_PINS and choice["set_by_user"] == {}


def test_the_users_own_setting_wins_and_is_recorded():
    env = {"MKL_CBWR": "COMPATIBLE"}
    choice = pin_numerics([], env, machine="x86_64")
    assert env["MKL_CBWR"] == "COMPATIBLE"
    assert env["ATEN_CPU_CAPABILITY"] == "avx2"
    assert choice["set_by_user"] == {"MKL_CBWR": "COMPATIBLE"}
    assert "MKL_CBWR" not in choice["pinned"]


def test_native_pins_nothing_and_the_command_line_beats_the_environment():
    env = {ENV_MODE: "portable"}
    choice = pin_numerics(["experiment=staleness_4x", "numerics=native"], env, machine="x86_64")
    assert choice["mode"] == "native" and choice["source"] == "command line"
    assert env == {ENV_MODE: "native", ENV_PINNED: ""}  # a sweep's workers load torch alike
    env = {ENV_MODE: "native"}
    assert pin_numerics([], env, machine="x86_64")["source"] == ENV_MODE
    assert "ATEN_CPU_CAPABILITY" not in env


def test_a_child_process_tells_its_parents_pins_from_the_users():
    parent: dict[str, str] = {"MKL_CBWR": "COMPATIBLE"}  # the user's own
    pin_numerics([], parent, machine="x86_64")
    child = dict(parent)  # what a sweep's or a rerun's process inherits
    choice = pin_numerics(["numerics=native"], child, machine="x86_64")
    # the parent's pins are dropped, the user's setting stays and is recorded as the user's
    assert child == {"MKL_CBWR": "COMPATIBLE", ENV_MODE: "native", ENV_PINNED: ""}
    assert choice["set_by_user"] == {"MKL_CBWR": "COMPATIBLE"}
    child = dict(parent)
    choice = pin_numerics([], child, machine="x86_64")  # a portable child: the same pins, ours
    assert choice["pinned"] == {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert choice["set_by_user"] == {"MKL_CBWR": "COMPATIBLE"}
    # a pin whose value was changed since is the user's
    child = {**parent, "ATEN_CPU_CAPABILITY": "avx512"}
    assert pin_numerics(["numerics=native"], child, machine="x86_64")["set_by_user"] == {
        "ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "COMPATIBLE"}
    # the last override of a key wins, as in Hydra
    assert pin_numerics(["numerics=native", "numerics=portable"], {}, machine="x86_64")["mode"] == "portable"


def test_a_cpu_without_x86_vector_units_is_left_alone_and_says_why():
    env: dict[str, str] = {}
    choice = pin_numerics([], env, machine="aarch64")
    assert env == {ENV_MODE: "portable", ENV_PINNED: ""} and choice["pinned"] == {}
    assert choice["note"].startswith("aarch64: no x86 instruction set to pin")


def test_an_unknown_mode_is_left_for_the_config_check():
    env: dict[str, str] = {}
    assert pin_numerics(["numerics=fast"], env, machine="x86_64")["mode"] == "fast"
    assert env == {}
    with pytest.raises(ConfigError, match=r"^numerics must be one of \['portable', 'native'\], got 'fast'"):
        compose(["numerics=fast"])


def test_the_config_cannot_disagree_with_the_mode_torch_loaded_in(tmp_path):
    from src.preflight import check_machine

    cfg = compose([f"cache_dir={tmp_path}"])
    assert cfg.numerics == "portable"  # this test process loaded torch in the default mode
    check_machine(cfg)
    cfg.numerics = "native"  # as a yaml would set it, after torch loaded
    with pytest.raises(ConfigError, match=r"^numerics: the config says 'native' but torch loaded "
                                          r"in 'portable' mode.*give numerics=native on the command line"):
        check_machine(cfg)


def _loaded(args: list[str], env_extra: dict[str, str] | None = None) -> dict:
    """What a fresh interpreter that pins as an entry point does (src/pinning.py), then loads
    torch, uses: (its mode, the ISA)."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in (*PORTABLE_PINS, ENV_MODE, ENV_PINNED)}
    env.update(env_extra or {})
    code = ("import json, sys\nfrom src.pinning import pin_process\npin_process()\nimport torch\n"
            "from src._numerics import fingerprint\n"
            "print(json.dumps(fingerprint()))")
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


@pytest.mark.slow
@pytest.mark.skipif("avx2" not in cpu_model_and_flags()[1], reason="needs an x86-64 CPU with AVX2")
def test_torch_dispatches_to_avx2_in_portable_mode_and_to_its_own_best_in_native():
    import torch

    portable = _loaded([])
    assert portable["mode"] == "portable" and portable["isa"] == "AVX2"
    assert portable["mkl_branch"] == "AVX2" and portable["onednn_max_isa"] == "AVX2"
    native = _loaded(["numerics=native"])
    # started by a process of this project that pinned portable: native all the same
    from_a_parent = _loaded(["numerics=native"], {**PORTABLE_PINS, ENV_PINNED: ",".join(PORTABLE_PINS)})
    assert from_a_parent["isa"] == native["isa"] and from_a_parent["set_by_user"] == {}
    assert native["mode"] == "native" and native["mkl_branch"] is None
    widest = "AVX512" if "avx512f" in cpu_model_and_flags()[1] else "AVX2"
    assert native["isa"] == widest
    for key in ("threads", "torch", "mkl", "onednn", "cpu_model", "cpu_flags", "machine"):
        assert portable[key] == native[key], key
    assert portable["torch"] == torch.__version__


def test_the_warm_start_key_of_a_native_build_is_its_own():
    from src.tasks import get_task
    from src.warm_start import cache_key

    task = get_task("arithmetic")
    # the default config's key: the one the shipped build and every committed run carry
    assert cache_key(task, {}, {}, 0) == cache_key(task, {}, {}, 0, numerics="portable") == "5fb97ee7a8113be3"
    assert cache_key(task, {}, {}, 0, numerics="native") != "5fb97ee7a8113be3"
    # a GPU build's weights do not depend on the CPU's instructions
    assert (cache_key(task, {}, {}, 0, device="cuda", numerics="native")
            == cache_key(task, {}, {}, 0, device="cuda"))


@pytest.mark.parametrize("text, model, flags, vendor", [
    # x86-64: two processor blocks; only the first is read
    ("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9R14\n"
     "flags\t\t: fpu sse4_2 avx avx2 fma\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\n"
     "model name\t: other\nflags\t\t: avx512f\n", "AMD EPYC 9R14", ["sse4_2", "avx", "avx2", "fma"],
     "AuthenticAMD"),
    # aarch64: `Features`, no model name or vendor_id: the platform's name stands in
    ("processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\n\n", None, [], ""),
])
def test_cpuinfo_is_read_from_its_first_processor_block(monkeypatch, tmp_path, text, model,
                                                         flags, vendor):
    import builtins
    import platform

    from src import _numerics

    fake = tmp_path / "cpuinfo"
    fake.write_text(text)
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda path, *a, **k: real_open(
        fake if path == "/proc/cpuinfo" else path, *a, **k))
    got_model, got_flags = _numerics.cpu_model_and_flags()
    assert got_model == (model or platform.processor() or platform.machine())
    assert got_flags == flags
    assert _numerics.cpu_vendor() == vendor
