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


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_the_fused_kernel_is_the_same_update_to_rounding(optimizer):
    """train.fused_optimizer=true: torch's fused kernel, and the same AdamW / heavy-ball update
    as the default per-tensor loop up to the last bits; the default stays the loop."""
    import torch

    from src.build import build_optimizer

    torch.manual_seed(0)
    weights = [torch.randn(64, 32), torch.randn(32)]
    grads = [[torch.randn_like(w) * 1e-2 for w in weights] for _ in range(4)]
    after = {}
    for fused in (False, True):
        cfg = compose([f"train.optimizer={optimizer}", "train.lr=0.01", "train.weight_decay=0.1",
                       f"train.fused_optimizer={str(fused).lower()}"])
        model = torch.nn.ParameterList([torch.nn.Parameter(w.clone()) for w in weights])
        opt, _ = build_optimizer(cfg.train, model)
        assert bool(opt.defaults.get("fused")) is fused
        for step in grads:
            for p, g in zip(model, step, strict=True):
                p.grad = g.clone()
            opt.step()
        after[fused] = [p.detach().clone() for p in model]
    moved = [(a - w).abs().max() for a, w in zip(after[False], weights, strict=True)]
    assert all(m > 1e-3 for m in moved)  # four steps moved every tensor by far more than rounding
    for loop, fused in zip(after[False], after[True], strict=True):
        torch.testing.assert_close(fused, loop, atol=1e-6, rtol=1e-6)
