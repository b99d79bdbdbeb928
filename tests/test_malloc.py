"""glibc's thresholds are set by `pin_process()` (src/pinning.py) unless the user set glibc's own malloc variables."""

from __future__ import annotations

import platform

import pytest

from src._malloc import keep_freed_memory


@pytest.mark.parametrize("var", ["MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"])
def test_the_users_own_glibc_settings_win(var):
    assert keep_freed_memory({var: "131072"}) is False


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_the_thresholds_are_accepted_on_glibc():
    assert keep_freed_memory({}) is True
