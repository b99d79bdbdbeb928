#!/usr/bin/env bash
# GPU check on a bare CUDA machine, with nothing to download. Learning first, timings after:
# stage 1 reruns the ramble testbed's committed 4x cell (ppo and bapo, seed 0, its shipped
# warm start) on the GPU and reads each gain against the committed 8 seeds; stage 2 builds
# and warm-starts a ~78M-parameter model of the tiny family here on the GPU (bf16 autocast,
# fp32 weights), REFUSES to time it when the warm start's greedy accuracy or its share of
# responses that end is under the floor the script states, and only then times ppo and bapo
# at staleness 4 (64 prompts x 8 samples, 20 steps each) with HF-generate rollouts on the
# GPU. Writes $OUT_DIR/gpu_check.json (stage 1's runs and comparisons; the warm start and
# its floor; per step: rollout / behaviour / update seconds, tokens/s, peak GPU memory,
# FLOPs and MFU; per run: a metric summary) and $OUT_DIR/sizing_table.md. See docs/gpu.md.
#
# Needs: Python >= 3.11 with torch (CUDA build), transformers 5, numpy, pandas, pyarrow,
# PyYAML and tqdm; pytest for the CUDA-marked tests. hydra-core, omegaconf and the ANTLR
# 4.9.3 runtime install from the wheel folder $WHEELS (default .whl/, 1.4 MB), and the
# project itself with --no-deps. Fill the folder on a machine with network (pure-python
# wheels, good for any Python 3):
#   pip wheel --no-deps --wheel-dir .whl antlr4-python3-runtime==4.9.3   # sdist only on PyPI
#   pip download --dest .whl --only-binary=:all: --python-version 3.12 --platform any \
#       --implementation py --no-deps hydra-core==1.3.8 omegaconf==2.3.1 \
#       'setuptools>=68' wheel packaging
# What this script runs when hydra or the project is missing (setuptools, wheel and its
# dependency packaging are the project's build requirements, for pip's isolated build):
#   python -m pip install --no-index --find-links .whl hydra-core omegaconf antlr4-python3-runtime
#   python -m pip install --no-index --find-links .whl --no-deps -e .
# A system Python that refuses installs (PEP 668): python -m venv --system-site-packages
# .venv-gpu && . .venv-gpu/bin/activate, then rerun (torch & co. stay the system's).
#
# Usage:
#   OUT_DIR=/tmp/gpu_check bash benchmarks/gpu_check.sh                 # the GPU check
#   OUT_DIR=/tmp/dry DEVICE=cpu bash benchmarks/gpu_check.sh            # CPU dry run, tiny sizes
#   SIZE=smoke DEVICE=cpu OUT_DIR=/tmp/s bash benchmarks/gpu_check.sh   # seconds (the test)
# Knobs: PYTHON, DEVICE (cuda), SIZE (auto: gpu on CUDA, cpu otherwise), WHEELS (.whl),
# INSTALL (auto | no), CUDA_TESTS (auto: pytest -m cuda on CUDA | no), ROLLOUT (hf | vllm |
# auto: vllm when it imports), PEAK_TFLOPS (the GPU's dense bf16 peak when its name is not
# known), ARGS (more arguments for benchmarks/gpu_check.py, e.g. "--steps 10 train.lr=2e-5",
# "--testbed none" to skip stage 1, "--min-greedy-accuracy 0.2" to raise the floor).
# Expected on one H100/H200 (an ESTIMATE, not measured; benchmarks/gpu_estimate.py and
# docs/gpu.md): stage 1 1-3 min a run, warm start 20-60 s, each timed run 20-60 s: 5-10
# minutes in all. The warm start's SFT is the one the H200 ran in 62 s.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
DEVICE=${DEVICE:-cuda}
SIZE=${SIZE:-auto}
WHEELS=${WHEELS:-.whl}
INSTALL=${INSTALL:-auto}
CUDA_TESTS=${CUDA_TESTS:-auto}
ROLLOUT=${ROLLOUT:-hf}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/gpu_check.XXXXXX)}
export WANDB_MODE=disabled HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT_DIR"
echo "== gpu_check: device=$DEVICE size=$SIZE rollout=$ROLLOUT out=$OUT_DIR python=$("$PY" -V 2>&1)"
if [[ $DEVICE == cuda* ]]; then
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv || echo "(no nvidia-smi)"
fi

if [[ $INSTALL == auto ]]; then
  if ! "$PY" -c "import hydra, omegaconf" 2>/dev/null; then
    echo "== installing hydra-core, omegaconf, antlr4-python3-runtime from $WHEELS (offline)"
    "$PY" -m pip install --no-index --find-links "$WHEELS" hydra-core omegaconf antlr4-python3-runtime
  fi
  if ! "$PY" -c "import importlib.metadata as m; m.version('bapo-repro')" 2>/dev/null; then
    echo "== installing this project with --no-deps from $WHEELS (offline)"
    "$PY" -m pip install --no-index --find-links "$WHEELS" --no-deps -e .
  fi
fi
"$PY" -c "import hydra, omegaconf, torch, transformers, pandas, pyarrow" || {
  echo "missing packages: fill $WHEELS and rerun (see the top of this script)"; exit 2; }

if [[ $DEVICE == cuda* ]] && ! "$PY" -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then
  echo "torch $("$PY" -c 'import torch; print(torch.__version__)') sees no CUDA device; DEVICE=cpu runs the dry run"
  exit 2
fi

tests_rc=0
if [[ $CUDA_TESTS == auto && $DEVICE == cuda* ]]; then
  echo "== CUDA-marked tests (bf16 autocast, device placement) -> $OUT_DIR/cuda_tests.txt"
  set +e   # a failure still lets the timings run; it sets the exit code
  "$PY" -m pytest -q -p no:cacheprovider -m cuda tests/test_precision.py 2>&1 \
    | tee "$OUT_DIR/cuda_tests.txt"
  tests_rc=${PIPESTATUS[0]}
  set -e
fi

# shellcheck disable=SC2086  # ARGS is a list of words on purpose
"$PY" benchmarks/gpu_check.py --out-dir "$OUT_DIR" --device "$DEVICE" --size "$SIZE" \
  --rollout "$ROLLOUT" ${ARGS:-}
if [[ $tests_rc != 0 ]]; then
  echo "the CUDA-marked tests failed (exit $tests_rc): see $OUT_DIR/cuda_tests.txt"
  exit 1
fi
