"""libgomp's wait policy: bounded spin on a busy machine, its default on an idle one, the
user's own setting always; chosen before torch (and so libgomp) is loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from src._wait_policy import BOUNDED_SPIN, BUSY_LOAD, choose_wait_policy
from tests.conftest import REPO


def test_a_busy_machine_gets_a_bounded_spin():
    env: dict[str, str] = {}
    choice = choose_wait_policy(env, load=BUSY_LOAD + 1.5)
    assert env == {"GOMP_SPINCOUNT": BOUNDED_SPIN} == {"GOMP_SPINCOUNT": "10000"}
    assert choice["GOMP_SPINCOUNT"] == "10000" and choice["reason"].startswith("load average 2.00")


def test_an_idle_machine_keeps_libgomps_default():
    env: dict[str, str] = {}
    choice = choose_wait_policy(env, load=0.1)
    assert env == {} and choice["GOMP_SPINCOUNT"] is None


@pytest.mark.parametrize("var", ["GOMP_SPINCOUNT", "OMP_WAIT_POLICY"])
def test_the_users_own_setting_wins(var):
    env = {var: "PASSIVE" if var == "OMP_WAIT_POLICY" else "77"}
    before = dict(env)
    choice = choose_wait_policy(env, load=50.0)
    assert env == before and choice["reason"] == "set by the user"


def test_the_policy_is_chosen_before_torch_loads():
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    code = ("import json, os, sys\nfrom src.pinning import pin_process\npin_process()\n"
            "from src._wait_policy import CHOICE\n"
            "print(json.dumps(['torch' in sys.modules, CHOICE, os.environ.get('GOMP_SPINCOUNT')]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    torch_loaded, choice, spin = json.loads(out.stdout)
    assert torch_loaded is False  # libgomp reads GOMP_SPINCOUNT once, when torch loads it
    assert choice["GOMP_SPINCOUNT"] == spin  # what meta.json records is what was set
    assert spin in (None, BOUNDED_SPIN)
