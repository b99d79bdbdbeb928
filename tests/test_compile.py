"""train.compile: torch.compile of the scoring forward only, the same numbers as eager up to
rounding, the decode loop's module left eager, and a bad backend refused by name."""

from __future__ import annotations

import pytest
import torch
from transformers.modeling_outputs import CausalLMOutput

from src.config import ConfigError
from src.policy import Scorer
from tests.conftest import compose
from tests.tiny_policy import VOCAB, tiny_rollout


class ToyLM(torch.nn.Module):
    """A causal LM with an HF forward's signature and output, small enough for dynamo to
    trace in seconds (tracing the tiny Llama takes minutes): embeddings, a masked running
    mean over the context, one layer, an LM head on the kept positions."""

    def __init__(self, seed: int = 0, width: int = 16):
        super().__init__()
        torch.manual_seed(seed)
        self.embed, self.position = torch.nn.Embedding(VOCAB, width), torch.nn.Embedding(32, width)
        self.mix, self.head = torch.nn.Linear(width, width), torch.nn.Linear(width, VOCAB)

    def forward(self, input_ids, attention_mask, position_ids, use_cache=False, logits_to_keep=0):
        mask = attention_mask[..., None].float()
        h = (self.embed(input_ids) + self.position(position_ids)) * mask
        h = torch.tanh(self.mix(h.cumsum(1) / mask.cumsum(1).clamp(min=1)))
        return CausalLMOutput(logits=self.head(h[:, -logits_to_keep:] if logits_to_keep else h))


def _score_and_grad(scorer: Scorer, data) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    scorer.model.zero_grad()
    logp, entropy = scorer(data)
    (logp * data.response_mask).sum().backward()
    return logp.detach(), entropy, [p.grad.clone() for p in scorer.model.parameters()]


@pytest.mark.slow  # dynamo's first trace: about 10 s
@pytest.mark.parametrize("micro_batch_size", [None, 3])
def test_compiled_scoring_gives_eager_logprobs_entropies_and_gradients(micro_batch_size):
    """aot_eager runs dynamo's and AOTAutograd's traces (what inductor compiles) with eager
    kernels, so this checks the wiring without a C++ compile (inductor's own kernels took
    over 4 minutes to build for this toy on a busy 2-core machine; benchmarks/bench_levers.py
    runs them on the real model, with the regime beside the speed); micro-batches of 3 give
    the compiled forward three padded lengths (dynamic shapes)."""
    torch.manual_seed(0)
    data = tiny_rollout()
    model = ToyLM()
    eager = _score_and_grad(Scorer(model, 0.7, micro_batch_size), data)
    compiled_scorer = Scorer(model, 0.7, micro_batch_size, "aot_eager")
    compiled = _score_and_grad(compiled_scorer, data)
    assert compiled_scorer._forward is not None
    torch.testing.assert_close(compiled[0], eager[0], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(compiled[1], eager[1], atol=1e-6, rtol=1e-6)
    assert any(g.abs().max() > 1e-4 for g in eager[2])  # the loss reaches the weights
    for got, want in zip(compiled[2], eager[2], strict=True):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    # the module itself stays eager: the decode loop calls it with its KV cache
    assert "forward" not in vars(model)


def test_the_default_scores_eagerly():
    assert compose([]).train.compile == "none"
    assert Scorer(ToyLM(), 1.0, None)._forward is None


def test_an_unknown_backend_is_refused_naming_the_choices():
    with pytest.raises(ConfigError, match=r"train.compile must be one of.*inductor"):
        compose(["train.compile=tvm"])



def test_inductor_without_a_cpu_compiler_is_refused_before_any_work(monkeypatch):
    """The check runs inductor's own compiler search, on the names it would try."""
    import shutil

    from torch._inductor import config as inductor_config

    monkeypatch.setattr(inductor_config.cpp, "cxx", (None, "no-such-compiler++"))
    with pytest.raises(ConfigError, match=r"train.compile =inductor on the CPU needs a C\+\+ "
                                          r"compiler; none of \['no-such-compiler\+\+'\] runs"):
        compose(["train.compile=inductor"])
    assert compose(["train.compile=aot_eager"]).train.compile == "aot_eager"  # needs no compiler
    if shutil.which("g++") is None:
        pytest.skip("no g++ here to find")
    monkeypatch.setattr(inductor_config.cpp, "cxx", (None, "g++"))
    assert compose(["train.compile=inductor"]).train.compile == "inductor"
