"""Step records cover every clip state, and the gradient rule reads the state list."""

from __future__ import annotations

import importlib

import torch

from src.algorithms.surrogate import CLIP_STATES, NO_GRADIENT, carries_gradient
from src.records import update_means
from src.run_vocab import STATE_FRACTIONS, STEP_MEAN_KEYS


def test_every_state_fraction_is_averaged_per_step():
    assert set(STATE_FRACTIONS) <= set(STEP_MEAN_KEYS)
    means = update_means([{"dual_clip_frac": 0.25}, {"dual_clip_frac": 0.75}])
    assert means["dual_clip_frac"] == 0.5  # committed dual-clip runs lacked it per step


def test_carries_gradient_follows_the_no_gradient_list_not_the_order(monkeypatch):
    states = torch.arange(len(CLIP_STATES), dtype=torch.int8)
    expected = [name not in ("clip_low", "clip_high", "dual", "masked") for name in CLIP_STATES]
    assert carries_gradient(states).tolist() == expected
    # a no-gradient state appended to the list (code 8) must read as one, though its code
    # is above `masked` (the old rule, state > MASKED, counted it as carrying a gradient)
    new_code = len(CLIP_STATES)
    monkeypatch.setattr(importlib.import_module("src.algorithms.surrogate"), "NO_GRADIENT", (*NO_GRADIENT, new_code))
    assert not carries_gradient(torch.tensor([new_code], dtype=torch.int8)).item()
