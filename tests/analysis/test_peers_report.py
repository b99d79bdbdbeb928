"""The `peers` sweep's methods show in Fig. 11 and the report, each in its own colour."""

from __future__ import annotations

import pytest
import yaml

from analysis import make_figures
from analysis.core import style
from analysis.core.loader import load_runs
from analysis.figures import final as fig_final
from tests.conftest import REPO

PEERS = yaml.safe_load((REPO / "experiments" / "sweeps.yaml").read_text())["peers"]["grid"]["method"]


def test_peer_methods_have_fixed_distinct_colours_after_the_paper_grid():
    colours = style.method_palette(PEERS)
    assert len(set(colours.values())) == len(colours)
    assert all(m in style.KNOWN_METHOD_COLORS for m in PEERS)
    assert style.method_order(PEERS) == PEERS  # ppo, clip_higher, bapo, then the peers in order


@pytest.mark.slow
def test_fig11_and_the_report_show_every_peer(tmp_path, write_run, opts):
    root = tmp_path / "runs"
    for method in PEERS:
        for seed in (0, 1):
            write_run(root, method, 4, seed, experiment="peers", steps=4)
    runs = load_runs([root])
    res = fig_final.fig11_final_accuracy(runs, opts)
    assert set(res.data["method"]) == set(PEERS)
    assert res.data.groupby("method")["seed"].nunique().eq(2).all()
    out = tmp_path / "out"
    assert make_figures.main(["--runs", str(root), "--out", str(out), "--formats", "png"]) == 0
    assert (out / "fig11_final_accuracy.png").stat().st_size > 0
    text = (out / "REPORT.md").read_text()
    for method in PEERS:
        assert f"| {method} |" in text, method
