"""Warm start for tiny models: tokenizer + random init + SFT on worked solutions, cached.

A second, small training loop before the RL run, so its own package (not a model's part):
`settings.py` (the defaults, and the one interface the config's checks use), `sft.py` (the
SFT), `evaluate.py` (its held-out accuracy), `cache.py` (the cache key, the shipped builds,
the build and the cache entry). The names below are the package's API; the SFT and the eval
are imported from their modules (`from src.warm_start.sft import sft, sft_batch`).

RL from a random tiny model earns zero reward, so every CPU run starts from a model that
was fine-tuned on `prompt + worked solution + <eos>` (loss on the solution and EOS only).
The defaults are tuned so that on a 2-core CPU the SFT takes about two minutes and the
held-out accuracy lands where RL groups of 8 samples mix right and wrong answers.

The SFT runs on the run's device (`device`), optionally under bf16 autocast (`autocast`,
see `src/models/precision.py`); a GPU check warm-starts a 25-100M model that way in about
a minute (an estimate: benchmarks/gpu_estimate.py) instead of hours on CPU.

The result is cached under `cache_dir/<key>/` where `key` hashes (task config, model config,
SFT config, seed, WARM_START_VERSION, and the device type, autocast dtype and numerics mode
when they are not the CPU / fp32 / portable default, since those change the weights) after
defaults are filled in. The SFT always runs on `BUILD_THREADS` CPU threads, whatever the
run's own count, because threads split its reductions and so change the weights.

Builds that committed results start from are shipped in the repository
(`experiments/warm_starts/<key>/`, `SHIPPED_DIR`): a run whose key has a shipped build loads
it and never builds, so every machine starts from the same weights, even one whose CPU
would round the SFT otherwise. `experiments/warm_starts/rebuild.py` rebuilds them from
scratch and compares the digests.
The directory holds the model and tokenizer (`save_pretrained`, so `load_hf_model(path)`
also opens it) and `info.json`. It is written to a temporary directory and renamed into
place, so a crash never leaves a half-written cache entry and concurrent writers cannot
corrupt one.
"""

from src.warm_start.cache import (
    BUILD_THREADS,
    MEASURED_DEFAULT_BUILD,
    SHIPPED_DIR,
    WARM_START_VERSION,
    build,
    build_notice,
    cache_key,
    set_aside,
    warm_start,
    weights_digest,
)
from src.warm_start.settings import (
    DEFAULT_MODEL_CFG,
    DEFAULT_SFT_CFG,
    resolve_configs,
    settings_problem,
    tiny_layers,
    tiny_shape,
)

__all__ = [
    "BUILD_THREADS", "DEFAULT_MODEL_CFG", "DEFAULT_SFT_CFG", "MEASURED_DEFAULT_BUILD",
    "SHIPPED_DIR", "WARM_START_VERSION", "build", "build_notice", "cache_key",
    "resolve_configs", "set_aside", "settings_problem", "tiny_layers", "tiny_shape", "warm_start",
    "weights_digest",
]
