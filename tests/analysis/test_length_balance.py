"""The length-balance identity: with group-normalised advantages, a group's positive and
negative contributions split as its within-group mean lengths, so the rollout's positive
share follows from the lengths alone. Checked against contributions summed directly."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.calibration.length_balance import balance, group_lengths


def _responses(group: int, rewards: list[float], lengths: list[int]) -> list[dict]:
    return [{"run_id": "r", "step": 0, "group_id": group, "response_id": group * 10 + i,
             "reward": rw, "response_length": n} for i, (rw, n) in enumerate(zip(rewards, lengths, strict=True))]


def test_implied_share_equals_the_directly_summed_contributions():
    rows = (_responses(0, [1, 1, 0, 0], [10, 10, 20, 20])      # p = 0.5
            + _responses(1, [1, 0, 0, 0], [30, 30, 30, 30])    # p = 0.25, equal lengths
            + _responses(2, [0, 0, 0, 0], [50, 50, 50, 50]))   # all wrong: no gradient
    resp = pd.DataFrame(rows)
    # Advantages as the trainer makes them: (r - group mean) / group std (population)
    g = resp.groupby("group_id")["reward"]
    std = g.transform(lambda r: r.std(ddof=0))
    resp["advantage"] = ((resp["reward"] - g.transform("mean")) / std.where(std > 0)).fillna(0.0)
    # token rows: every token of a response carries its advantage
    tokens = resp.loc[resp.index.repeat(resp["response_length"])]
    contrib = (tokens["advantage"].abs()).groupby(np.sign(tokens["advantage"])).sum()
    direct = contrib[1.0] / (contrib[1.0] + contrib[-1.0])
    assert direct == pytest.approx(71.9615 / 163.9230, rel=1e-4)  # by hand: 20 + 51.96 of ...
    groups = group_lengths(tokens.reset_index(drop=True))
    assert len(groups) == 2  # the all-wrong group has no mixed signs
    b = balance(groups)
    assert b["implied rho"] == pytest.approx(direct)
    w0, w1 = 0.5, np.sqrt(0.25 * 0.75)
    assert b["within-group L-/L+"] == pytest.approx((w0 * 20 + w1 * 30) / (w0 * 10 + w1 * 30))
