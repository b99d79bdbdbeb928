"""Pin the CPU instruction set that torch's math kernels dispatch to, before torch loads.

Why: torch, MKL and oneDNN pick their kernels by the CPU's vector instructions. The same
config and seed gave another warm start on an AVX-512 machine than on an AVX2 one (greedy
0.398 against 0.430) and so other numbers from step 0 on. With ATen's dispatch, MKL's code
path and oneDNN's instruction set pinned to AVX2 (which every x86-64 CPU since 2013-2015
has), the warm start built on a 2-core AMD EPYC with AVX-512 was bit-identical to one built
on an AVX2 machine, and so was a whole run (docs/numerics.md has the measurements).

The mode (`numerics`, a config setting) comes from the command line's `numerics=...`, else
the environment's `REPRO_NUMERICS`, else `portable`. It is read here from `sys.argv`, not
from the composed config, because these libraries read their environment once, when they
load, and Hydra composes the config long after `import torch`; `src.run` then checks that
the config's value equals the mode this process loaded (a yaml cannot switch it).

- `portable` (default): on x86-64 set the variables of `PORTABLE_PINS` that the user has
  not set; elsewhere (ARM) there is nothing to pin and the fingerprint says so.
- `native`: set nothing; the libraries use the widest instructions the CPU has (faster on
  some CPUs; numbers then depend on the CPU).

The variables the user set always win and are recorded as such. `fingerprint()` (after
torch loads) is what meta.json and the warm start's info.json record.
"""

from __future__ import annotations

import os
import platform
import sys

MODES = ("portable", "native")
DEFAULT_MODE = "portable"
ENV_MODE = "REPRO_NUMERICS"
# The variables this project pinned, for the processes it starts (sweeps, reruns, benchmarks):
# they inherit the pins with the environment, and a child in native mode must drop them
# rather than take them for the user's own settings.
ENV_PINNED = "REPRO_NUMERICS_PINNED"
ARG_PREFIX = "numerics="
# ATen's vectorised kernels, MKL's conditional-numerical-reproducibility branch and
# oneDNN's instruction set, all at AVX2: the setting measured to make an AVX-512 machine
# agree with an AVX2 one (docs/numerics.md; MKL's STRICT mode changed nothing measured).
PORTABLE_PINS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
X86_MACHINES = ("x86_64", "amd64", "i386", "i686")
# The CPU flags that decide which kernels run (the full list is long and says little more).
SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
              "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16")
# What was decided, for the fingerprint: {"mode", "pinned", "set_by_user", "source", "note"}.
CHOICE: dict = {}


def requested_mode(argv: list[str] | None = None, environ=os.environ) -> tuple[str, str]:
    """(mode, where it came from). An unknown value is returned as is: the config check
    (`numerics` must be portable or native) names it, before any work starts."""
    argv = sys.argv[1:] if argv is None else argv
    for arg in reversed(argv):  # Hydra: the last override of a key wins
        if arg.startswith(ARG_PREFIX):
            return arg[len(ARG_PREFIX):], "command line"
    if environ.get(ENV_MODE):
        return environ[ENV_MODE], ENV_MODE
    return DEFAULT_MODE, "default"


def pin_numerics(argv: list[str] | None = None, environ=os.environ,
                 machine: str | None = None) -> dict:
    """Set the portable pins in `environ` (unless the mode is native, the CPU is not x86, or
    the user set them); returns what was decided. Must run before the first `import torch`."""
    mode, source = requested_mode(argv, environ)
    machine = (machine or platform.machine()).lower()
    # pins a parent process of this project set (unchanged since): not the user's settings
    inherited = {k for k in environ.get(ENV_PINNED, "").split(",")
                 if k in PORTABLE_PINS and environ.get(k) == PORTABLE_PINS[k]}
    pinned, by_user, note = {}, {}, None
    if mode == "portable":
        if machine in X86_MACHINES:
            for key, value in PORTABLE_PINS.items():
                if key in environ and key not in inherited:
                    by_user[key] = environ[key]
                else:
                    environ[key] = value
                    pinned[key] = value
        else:
            note = f"{machine}: no x86 instruction set to pin; kernels are the CPU's own"
    elif mode == "native":
        for key in inherited:
            del environ[key]
        by_user = {k: environ[k] for k in PORTABLE_PINS if k in environ}
    if mode in MODES:
        environ[ENV_MODE] = mode  # worker processes (sweeps) load torch in the same mode
        environ[ENV_PINNED] = ",".join(sorted(pinned))
    CHOICE.clear()
    CHOICE.update(mode=mode, source=source, pinned=pinned, set_by_user=by_user, note=note)
    return dict(CHOICE)


def active_mode() -> str:
    return CHOICE.get("mode", DEFAULT_MODE)


def _first_cpu_block() -> dict[str, str]:
    """The first processor's `key: value` lines of /proc/cpuinfo (every core of a machine
    reports the same model, vendor and flags); empty where there is none (not Linux)."""
    block: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if not key.strip() and block:  # a blank line ends the first block
                    break
                block.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return block


def cpu_model_and_flags() -> tuple[str, list[str]]:
    """(the CPU's model name, its SIMD flags of `SIMD_FLAGS`) from /proc/cpuinfo on Linux."""
    block = _first_cpu_block()
    model = block.get("model name") or platform.processor() or platform.machine()
    flags = set((block.get("flags") or block.get("Features") or "").split())
    return model, [f for f in SIMD_FLAGS if f in flags]


def cpu_vendor() -> str:
    """The CPU's vendor id (GenuineIntel, AuthenticAMD, ...) from /proc/cpuinfo, else ''."""
    return _first_cpu_block().get("vendor_id", "")


def numerics_family(fp: dict) -> str:
    """The machines whose portable-mode runs are measured to round alike, from a fingerprint:
    the CPU vendor, ATen's ISA and the MKL branch in effect. MKL honours a named
    reproducibility branch (MKL_CBWR=AVX2) on Intel CPUs only and runs its AUTO branch on
    others (oneMKL developer guide, "Getting Started with Conditional Numerical
    Reproducibility"), so an AMD EPYC and an Intel Xeon pinned alike differ in the last bits
    (docs/numerics.md). Fingerprints recorded before the vendor was read name it in the model."""
    vendor = fp.get("cpu_vendor") or next(
        (v for k, v in (("AMD", "AuthenticAMD"), ("Intel", "GenuineIntel"))
         if k in str(fp.get("cpu_model", ""))), "unknown")
    branch = fp.get("mkl_branch") if vendor == "GenuineIntel" else "AUTO"
    return f"{vendor}/{fp.get('isa')}/MKL {branch}"


def library_versions() -> dict[str, str | None]:
    """MKL's and oneDNN's versions as torch reports its build."""
    import re

    import torch

    shown = torch.__config__.show()
    mkl = re.search(r"Math Kernel Library Version ([^\s]+)", shown)
    dnn = re.search(r"MKL-DNN v([^\s]+)", shown)
    return {"mkl": mkl.group(1) if mkl else None, "onednn": dnn.group(1) if dnn else None}


def fingerprint(threads: int | None = None) -> dict:
    """What decides a CPU run's rounding: the mode, the instruction set torch dispatches to,
    MKL's branch, oneDNN's cap, threads, library versions, the CPU. For meta.json."""
    import torch

    model, flags = cpu_model_and_flags()
    return {
        "mode": active_mode(),
        "source": CHOICE.get("source"),
        "pinned": dict(CHOICE.get("pinned", {})),
        "set_by_user": dict(CHOICE.get("set_by_user", {})),
        "note": CHOICE.get("note"),
        "isa": torch.backends.cpu.get_cpu_capability(),
        "mkl_branch": os.environ.get("MKL_CBWR"),
        "onednn_max_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
        "threads": threads if threads is not None else torch.get_num_threads(),
        "torch": torch.__version__,
        **library_versions(),
        "machine": platform.machine(),
        "cpu_model": model,
        "cpu_vendor": cpu_vendor(),
        "cpu_flags": flags,
    }
