"""CI runs property tests derandomized (tests/conftest.py), so it cannot flake on a new draw."""

from __future__ import annotations

import os

from hypothesis import settings


def test_ci_runs_a_fixed_set_of_examples():
    chosen = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "explore")
    assert settings.default.derandomize == (chosen == "ci")
