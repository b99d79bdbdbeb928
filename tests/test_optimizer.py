"""train.optimizer: the one optimizer every method shares."""

from __future__ import annotations

import pytest

from src.config import ConfigError
from tests.conftest import compose


def test_sgd_optimizer_moves_weights_by_their_gradient():
    import torch

    from src.build import build_optimizer

    cfg = compose(["train.optimizer=sgd", "train.lr=0.5", "train.betas=[0.0,0.999]"])
    model = torch.nn.Linear(2, 1, bias=False)
    model.weight.data[:] = torch.tensor([[1.0, -1.0]])
    optimizer, _ = build_optimizer(cfg.train, model)
    assert isinstance(optimizer, torch.optim.SGD)
    model.weight.grad = torch.tensor([[0.2, 0.0]])
    optimizer.step()
    # plain gradient step: w - lr * g, the zero-gradient weight untouched (Adam would move
    # both by about lr)
    assert model.weight.data[0].tolist() == pytest.approx([0.9, -1.0], abs=1e-7)
    with pytest.raises(ConfigError, match="train.optimizer must be one of"):
        compose(["train.optimizer=lion"])
