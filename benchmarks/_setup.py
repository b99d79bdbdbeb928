"""The start the scripts of benchmarks/ share: this checkout's root first on sys.path, so that
`src` and `analysis` are this checkout's whatever is installed, and `REPO`, that root.

A script imports it before anything of the project (a script's own folder is on sys.path
when it runs), then pins its process itself, before torch loads (src/pinning.py;
tests/test_pinning.py reads each entry point for that call):

    from _setup import REPO
    from src.pinning import pin_process

    if __name__ == "__main__":
        pin_process()

Importing it loads no torch and sets nothing in the environment.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
