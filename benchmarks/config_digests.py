"""Every conf/experiment x conf/method pair composed, one line each: `experiment method sha256`.

    python benchmarks/config_digests.py [--validated] > digests.txt

The digest is of `OmegaConf.to_yaml(cfg, resolve=True)` of the composed config (as
`python -m src.run experiment=E method=M` composes it, without Hydra's own section);
`--validated` digests the config.yaml a run would write instead (`src.config.validate`, then
`to_container`). A pair that does not compose or validate prints `experiment method
FAILED: <reason>`. Two checkouts that print the same lines compose every pair alike: run it
before and after a change to the config and `diff` the outputs.
"""

from __future__ import annotations

import argparse
import hashlib
import sys

import yaml
from _setup import REPO  # this checkout first on sys.path

from src.pinning import pin_process

if __name__ == "__main__":
    pin_process()

from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

import src.compose  # noqa: E402, F401 - every registry loaded, the defaults given to Hydra
from src.config import to_container, validate  # noqa: E402


def digest(experiment: str, method: str, validated: bool) -> str:
    cfg = compose(config_name="config", overrides=[f"experiment={experiment}", f"method={method}"])
    if validated:
        text = yaml.safe_dump(to_container(validate(cfg)), sort_keys=False)
    else:
        text = OmegaConf.to_yaml(cfg, resolve=True)
    return hashlib.sha256(text.encode()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--validated", action="store_true",
                        help="digest the validated config (config.yaml) instead of the composed one")
    args = parser.parse_args()
    experiments = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml"))
    methods = sorted(p.stem for p in (REPO / "conf" / "method").glob("*.yaml"))
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        for experiment in experiments:
            for method in methods:
                try:
                    line = digest(experiment, method, args.validated)
                except Exception as e:  # a pair that needs an uninstalled package, a bad value
                    line = f"FAILED: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                print(experiment, method, line, flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
