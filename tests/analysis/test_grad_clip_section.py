"""REPORT.md's gradient-norm clipping section: every cell's share of clipped updates over
seeds, beside its final accuracies, checked against values worked by hand."""

from __future__ import annotations

import pandas as pd

from analysis.reports.grad_clip_section import grad_clip_cells, grad_clip_lines


def summary(shares: dict[tuple[str, int], list[float]]) -> pd.DataFrame:
    rows = [{"suite": "s", "experiment": f"e_{k}x", "method": m, "staleness": k, "seed": i,
             "grad_clip_share": v, "final_sampled_acc": 0.5, "final_greedy_acc": 0.25 + i / 4}
            for (m, k), values in shares.items() for i, v in enumerate(values)]
    return pd.DataFrame(rows)


def test_every_cell_gets_its_share_and_spread():
    # ppo 4x: 0.40, 0.50, 0.60 -> mean 0.50, sd 0.10, t(2) 4.303 -> half-width 0.248
    s = summary({("ppo", 4): [0.40, 0.50, 0.60], ("bapo", 4): [0.84, 0.84, 0.84]})
    table = grad_clip_cells(s, ["s"]).set_index("method")
    assert table.loc["ppo", "grad-norm clipped"] == "0.50 ± 0.25 (n=3)"
    assert table.loc["ppo", "lowest - highest seed"] == "0.40 - 0.60"
    assert table.loc["bapo", "lowest - highest seed"] == "0.84 - 0.84"
    # greedy 0.25, 0.50, 0.75: mean 0.5, sd 0.25 -> half-width 0.621
    assert table.loc["ppo", "final greedy acc"] == "0.500 ± 0.621 (n=3)"
    assert table.loc["ppo", "staleness"] == "4x"
    text = "\n".join(grad_clip_lines(s, ["s"]))
    assert text.startswith("## Gradient-norm clipping beside the comparisons")
    assert "| suite |" not in text  # one suite: no suite column


def test_no_share_no_section():
    s = summary({("ppo", 4): [float("nan")] * 3})
    assert grad_clip_lines(s, ["s"]) == []
    assert grad_clip_lines(s.drop(columns="grad_clip_share"), ["s"]) == []
