"""The warm start's label smoothing (`model.sft.label_smoothing`, a lever for a warm start
with more entropy): its loss by hand, and 0 keeps every shipped warm start's cache key."""

from __future__ import annotations

import importlib

import pytest
import torch

import src.warm_start as warm
from src.warm_start.sft import _sft_loss
from tests.conftest import compose
from tests.tiny_policy import tiny_model


def test_smoothed_loss_by_hand():
    model = tiny_model()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 60, (3, 9), generator=gen)
    labels = ids.clone()
    labels[:, :4] = -100  # the prompt
    batch = {"input_ids": ids, "labels": labels}
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[:, :-1], dim=-1)
        target = labels[:, 1:]
        keep = target != -100
        nll = -logp.gather(-1, target.clamp(min=0)[..., None])[..., 0][keep]
        uniform = -logp.mean(dim=-1)[keep]
        for eps in (0.0, 0.1, 0.3):
            expected = ((1 - eps) * nll + eps * uniform).mean()
            assert torch.allclose(_sft_loss(model, batch, eps), expected, atol=1e-6)


def test_no_smoothing_keeps_the_shipped_cache_key():
    """The ramble testbed's shipped build (experiments/warm_starts/dd719a6a579f7725) is found
    under the key of the default config; any smoothing is another build."""
    cfg = compose(["experiment=ramble_4x"])
    task = importlib.import_module("src.build").build_task(cfg.task)
    key = warm.cache_key(task, cfg.model.architecture, cfg.model.sft, cfg.model.warm_start_seed)
    assert key == "dd719a6a579f7725"
    smoothed = warm.cache_key(task, cfg.model.architecture, {**cfg.model.sft, "label_smoothing": 0.1},
                              cfg.model.warm_start_seed)
    assert smoothed != key


@pytest.mark.parametrize("value", [-0.1, 1.0])
def test_a_smoothing_outside_0_1_is_refused(value):
    with pytest.raises(ValueError, match=r"sft.label_smoothing must be in \[0, 1\)"):
        warm.resolve_configs({}, {"label_smoothing": value})
