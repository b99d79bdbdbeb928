"""The rollout must feed the policy exactly what the warm start and the evaluator fed it."""

from __future__ import annotations

import torch

from src.models.tiny import build_tiny_model
from src.models.tokenizer import train_tokenizer
from src.rollout.hf import HFRollout
from src.tasks import get_task


def test_rollout_prompts_match_sft_and_eval_tokenization():
    task = get_task("arithmetic", max_terms=3)
    tokenizer = train_tokenizer(task.corpus(200), 320)
    model = build_tiny_model(tokenizer, hidden_size=32, num_layers=1, num_heads=2, seed=0)
    prompts = [task.problem(i).prompt for i in range(3)]
    roll = HFRollout(model, tokenizer).generate(prompts, num_samples=2, max_new_tokens=4,
                                                temperature=1.0, top_p=1.0, seed=0)
    expected = tokenizer(prompts, add_special_tokens=True)["input_ids"]  # as SFT and eval do
    for row in range(roll.size):
        ids = roll.prompt_ids[row][roll.prompt_mask[row]].tolist()
        assert ids == expected[row // 2]
        assert ids[0] == tokenizer.bos_token_id
    assert torch.equal(roll.group_ids, torch.tensor([0, 0, 1, 1, 2, 2]))
