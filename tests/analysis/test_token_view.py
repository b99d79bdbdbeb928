"""analysis/token_view.py: the page it writes, read back from a real browser's DOM.

Synthetic runs (conftest's writer) get token rows this file rewrites: ids a small tokenizer
knows, policy versions, and for the comparison a partner run whose step-0 tokens are the
same samples and whose step-1 responses diverge at one position. Every expectation (which
rows an update shows, which a filter keeps, which tokens pair, the header's counts) is
computed here from the Parquet with pandas, not by the viewer's code.

The browser tests need a chromium binary (Debian's `chromium`; CI installs it) and skip
without one.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis import token_view
from analysis.reports.token_data import open_run
from src.run_vocab import NO_GRADIENT_STATES
from src.telemetry import TOKEN_SCHEMA

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)
needs_browser = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium binary on PATH (Debian: apt-get install chromium)")
ROW_ORDER = ["step", "update", "group_id", "response_id", "position"]
FIRST_ID = 3  # after <pad>, <bos>, <eos>
TRAITS = {"ppo": {"adaptive_bounds": False},
          "bapo": {"adaptive_bounds": True, "target": "rho0", "measure": "rho",
                   "measure_at_start": "rho_before", "moved": "bapo_steps",
                   "reached": "bapo_reached", "undefined": "bapo_undefined"}}


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    from src.models.tokenizer import train_tokenizer
    from src.tasks import get_task

    path = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer(get_task("arithmetic", seed=0).corpus(300), 300).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def vocab_size(tokenizer_dir) -> int:
    return len(json.loads((tokenizer_dir / "tokenizer.json").read_text())["model"]["vocab"])


def write_tokens(run_dir: Path, rows: pd.DataFrame) -> None:
    """Replace a run's token parts with `rows`, one part per step, in the trainer's schema."""
    for part in (run_dir / "tokens").glob("*.parquet"):
        part.unlink()
    for step, part in rows.groupby("step"):
        table = pa.Table.from_pandas(part[TOKEN_SCHEMA.names], preserve_index=False)
        pq.write_table(table.cast(TOKEN_SCHEMA), run_dir / "tokens" / f"step_{step:06d}.parquet")


def read_tokens(run_dir: Path) -> pd.DataFrame:
    rows = pd.concat([pd.read_parquet(p) for p in sorted((run_dir / "tokens").glob("*.parquet"))])
    return rows.sort_values(ROW_ORDER).reset_index(drop=True)


def make_run(write_run, root: Path, method: str, vocab: int, *, seed: int = 0) -> Path:
    """A two-step, staleness-2 run with ids below `vocab` and policy versions."""
    synth = write_run(root, method, staleness=2, seed=seed, steps=2, tokens_per_step=160,
                      extra_config={"method.traits": TRAITS[method]})
    rows = synth.tokens.copy()
    rng = np.random.default_rng(7)  # the same ids in every run: step 0 pairs
    rows["token_id"] = rng.integers(FIRST_ID, vocab, len(rows)).astype(np.int32)
    rows["policy_version"] = np.where(rows["step"] == 0, 0, 2).astype(np.int32)
    rows["lag"] = (rows["step"] * 2 + rows["update"] - rows["policy_version"]).astype(np.int32)
    rows.loc[rows["response_id"] == 1, "advantage"] = 0.0  # update 1 holds every sign
    # the mismatch correction's columns: no IS weight, every token kept (a run without one)
    rows["is_weight"], rows["rs_keep"] = np.float32("nan"), True
    write_tokens(synth.path, rows)
    return synth.path


@pytest.fixture(scope="module")
def runs(tmp_path_factory, vocab_size) -> dict[str, Path]:
    """bapo and its ppo partner; at step 1 every third ppo response has another token at
    position 4 only, so its positions 4.. must not pair (the responses diverged there)."""
    from tests.analysis.conftest import write_run

    root = tmp_path_factory.mktemp("runs")
    bapo = make_run(write_run, root, "bapo", vocab_size)
    ppo = make_run(write_run, root, "ppo", vocab_size)
    rows = read_tokens(ppo)
    diverge = (rows["step"] == 1) & (rows["response_id"] % 3 == 0) & (rows["position"] == 4)
    rows.loc[diverge, "token_id"] = FIRST_ID + (rows.loc[diverge, "token_id"] - FIRST_ID + 1) % (
        vocab_size - FIRST_ID)
    write_tokens(ppo, rows)
    return {"bapo": bapo, "ppo": ppo, "root": root}


def build(argv: list[str], capsys) -> tuple[int, str]:
    code = token_view.main([str(a) for a in argv])
    return code, capsys.readouterr().err


# -- bad input: exit 2, one line, nothing written -------------------------------------------------

def test_bad_input_exits_2_with_one_line_and_writes_nothing(runs, tokenizer_dir, write_run,
                                                            tmp_path, capsys, vocab_size):
    out = tmp_path / "view.html"
    no_tokens = write_run(tmp_path / "bare", "ppo", staleness=2, write_tokens=False,
                          extra_config={"method.traits": TRAITS["ppo"]}).path
    other_seed = make_run(write_run, tmp_path / "seed1", "ppo", vocab_size, seed=1)
    # Same config and seed, but step 0 holds other tokens: not the same samples.
    unpaired = make_run(write_run, tmp_path / "other_samples", "ppo", vocab_size)
    rows = read_tokens(unpaired)
    rows.loc[rows["step"] == 0, "token_id"] = FIRST_ID
    write_tokens(unpaired, rows)
    tok = ["--tokenizer", tokenizer_dir]
    cases = {
        "no token rows": [no_tokens, *tok],
        "step 7 has no token rows": [runs["bapo"], "--step", 7, *tok],
        "config seed 0 vs 1": [runs["bapo"], "--vs", other_seed, *tok],
        "hold different tokens": [runs["bapo"], "--vs", unpaired, *tok],
        "meta.json names no warm start": [runs["bapo"]],  # and no --tokenizer
        "no tokenizer.json": [runs["bapo"], "--tokenizer", tmp_path],
    }
    for expected, argv in cases.items():
        code, err = build([*argv, "--out", out], capsys)
        assert code == 2, expected
        assert expected in err and err.count("\n") == 1, err
        assert not out.exists()


def test_missing_warm_start_names_how_to_build_it(runs, tmp_path, capsys):
    meta_path = runs["bapo"] / "meta.json"
    saved = meta_path.read_text()
    meta = json.loads(saved) | {"warm_start": ".cache/warm_start/0000feedfacecafe"}
    meta_path.write_text(json.dumps(meta))
    try:
        code, err = build([runs["bapo"], "--out", tmp_path / "v.html"], capsys)
    finally:
        meta_path.write_text(saved)
    assert code == 2
    assert "experiments/warm_starts/0000feedfacecafe" in err
    assert "python -m src.run experiment=sweep method=bapo" in err


def test_tokenizer_is_looked_up_in_order(runs, tokenizer_dir, tmp_path):
    """--tokenizer, then meta.json's path, then <repo>/.cache/warm_start/<key>, then
    <repo>/experiments/warm_starts/<key>: the first that holds a tokenizer wins."""
    repo = tmp_path / "repo"
    key = "abcdef0123456789"
    places = {"explicit": tmp_path / "explicit", "meta": tmp_path / "elsewhere" / key,
              "cache": repo / ".cache" / "warm_start" / key,
              "shipped": repo / "experiments" / "warm_starts" / key}
    view = open_run(runs["bapo"])
    view.meta = {"warm_start": str(places["meta"])}
    for name in reversed(list(places)):  # add them from the last tried to the first
        shutil.copytree(tokenizer_dir, places[name])
        explicit = places["explicit"] if name == "explicit" else None
        assert token_view.resolve_tokenizer(view, explicit, repo) == places[name]
    view.meta = {"warm_start": f".cache/warm_start/{key}"}  # relative: to the repo
    assert token_view.resolve_tokenizer(view, None, repo) == places["cache"]


def test_exported_run_says_it_is_a_sample(runs, tokenizer_dir, tmp_path, capsys):
    """An export keeps tokens/sampled.parquet and an export block; the page carries both."""
    export = tmp_path / "export" / "seed0"
    shutil.copytree(runs["bapo"], export)
    rows = read_tokens(export)
    kept = rows[rows["response_id"] % 5 == 0]
    for part in (export / "tokens").glob("*.parquet"):
        part.unlink()
    pq.write_table(pa.Table.from_pandas(kept[TOKEN_SCHEMA.names], preserve_index=False)
                   .cast(TOKEN_SCHEMA), export / "tokens" / "sampled.parquet")
    meta = json.loads((export / "meta.json").read_text())
    meta["export"] = {"response_fraction": 0.2, "token_rows_source": len(rows),
                      "token_rows_kept": len(kept)}
    (export / "meta.json").write_text(json.dumps(meta))
    out = tmp_path / "view.html"
    code, err = build([export, "--tokenizer", tokenizer_dir, "--out", out], capsys)
    assert code == 0, err
    head = page_head(out)
    assert head["runs"][0]["sample"]["response_fraction"] == 0.2
    assert head["runs"][0]["rows"] == len(kept)


def test_token_texts_are_visible_and_never_pass_for_other_text(tokenizer_dir):
    """A stray byte (no UTF-8 character alone) shows as its escape, not as the letter that
    spells it in the byte-level vocabulary; a newline shows and still breaks the line."""
    vocab = json.loads((tokenizer_dir / "tokenizer.json").read_text())["model"]["vocab"]
    pieces = ["ò", "Ċ", "+", "<eos>"]  # byte 0xf2, a newline, a plain and a special token
    texts = token_view.token_texts(tokenizer_dir, np.array([vocab[p] for p in pieces]))
    assert texts == ["\\xf2", "↵\n", "+", "<eos>"]


def page_head(path: Path) -> dict:
    text = path.read_text()
    found = re.search(r'<script type="application/json" id="view-head">(.*?)</script>', text, re.S)
    assert found
    return json.loads(found.group(1))


def test_page_needs_no_network(runs, tokenizer_dir, tmp_path, capsys):
    out = tmp_path / "view.html"
    code, err = build([runs["bapo"], "--vs", runs["ppo"], "--tokenizer", tokenizer_dir,
                       "--out", out], capsys)
    assert code == 0, err
    text = out.read_text()
    assert not re.search(r"https?://|<link|\bsrc=|@import", text)
    head = page_head(out)
    # each used token id's text once, not per row
    assert len(head["vocab"]) == len(set(head["vocab_ids"])) <= 300
    assert head["steps"] == [0, 1]


# -- in the browser ----------------------------------------------------------------------------------

class Dom(HTMLParser):
    """What the tests read of a dumped DOM: token spans, header count cells, the error box."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.spans: list[dict] = []
        self.counts: dict[tuple[int, str, str], int] = {}
        self.errors = ""
        self._cell: tuple | None = None
        self._in_errors = False
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "span" and "data-i" in a:
            self.spans.append({"run": int(a["data-run"]), "rid": int(a["data-r"]),
                               "pos": int(a["data-p"]), "tid": int(a["data-t"]),
                               "cls": set(a["class"].split())})
        elif tag == "td" and "data-state" in a:
            self._cell = (int(a["data-run"]), a["data-state"], a["data-sign"])
        elif tag == "pre" and a.get("id") == "errors":
            self._in_errors = True

    def handle_data(self, data):
        if self._cell is not None:
            self.counts[self._cell] = int(data)
            self._cell = None
        if self._in_errors:
            self.errors += data

    def handle_endtag(self, tag):
        if tag == "pre":
            self._in_errors = False

    def keys(self, run: int, cls: str | None = None, without: str | None = None) -> list:
        return [(s["rid"], s["pos"], s["tid"]) for s in self.spans if s["run"] == run
                and (cls is None or cls in s["cls"]) and (without is None or without not in s["cls"])]


def open_in_browser(page: Path, fragment: str, tmp_path: Path) -> Dom:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    profile.mkdir()
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=5000", "--dump-dom", f"{page.as_uri()}#{fragment}"],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Uncaught" not in proc.stderr, proc.stderr[-2000:]
    dom = Dom(proc.stdout)
    assert dom.errors.strip() == "", dom.errors
    assert dom.spans, "the page rendered no token (did its script run?)"
    return dom


def shown_rows(rows: pd.DataFrame, step: int, update: int) -> pd.DataFrame:
    here = rows[(rows["step"] == step) & (rows["update"] == update)]
    return here.sort_values(ROW_ORDER).reset_index(drop=True)


def keys(rows: pd.DataFrame) -> list:
    return list(zip(rows["response_id"], rows["position"], rows["token_id"], strict=True))


@pytest.fixture(scope="module")
def single_page(runs, tokenizer_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("page") / "view.html"
    assert token_view.main([str(runs["bapo"]), "--tokenizer", str(tokenizer_dir),
                            "--out", str(out)]) == 0
    return out


@needs_browser
def test_update_shows_its_rows_and_counts(runs, single_page, tmp_path):
    rows = read_tokens(runs["bapo"])
    dom = open_in_browser(single_page, "step=1&update=1&color=clip", tmp_path)
    expected = shown_rows(rows, 1, 1)
    assert dom.keys(0) == keys(expected)  # every row of the update, in order, and no other
    assert not dom.keys(0, cls="out")
    sign = np.sign(expected["advantage"]).map({1.0: "pos", -1.0: "neg", 0.0: "zero"})
    assert set(sign) == {"pos", "neg", "zero"}, "the update must hold every sign"
    table = expected.groupby([expected["clip_state"], sign]).size()
    assert table.drop("none", level=0, errors="ignore").sum() > 0, "no clipped token to count"
    shown = {(state, s): n for (run, state, s), n in dom.counts.items() if run == 0}
    assert shown == {(state, s): int(table.get((state, s), 0))
                     for state in set(expected["clip_state"]) | {"none"}
                     for s in ("pos", "neg", "zero")}


@needs_browser
@pytest.mark.parametrize("fragment, keep", [
    ("filter=clipped", lambda t: t["clip_state"].isin(NO_GRADIENT_STATES)),
    ("filter=entinc&lowp=0.3", lambda t: (t["advantage"] > 0) & (np.exp(t["logp"]) < 0.3)),
    ("filter=neg,clipped", lambda t: (t["advantage"] < 0) & t["clip_state"].isin(NO_GRADIENT_STATES)),
])
def test_filter_fades_exactly_the_other_tokens(runs, single_page, tmp_path, fragment, keep):
    rows = shown_rows(read_tokens(runs["bapo"]), 1, 1)
    dom = open_in_browser(single_page, f"step=1&update=1&{fragment}", tmp_path)
    kept = keep(rows.assign(logp=rows["logp"].astype(float)))
    assert 0 < kept.sum() < len(rows), "the filter must keep some tokens and drop others"
    assert dom.keys(0) == keys(rows)
    assert dom.keys(0, without="out") == keys(rows[kept])


def expected_pairs(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Paired rows: the same key and the same tokens at every position from 0 up to here."""
    key = ["step", "update", "response_id", "position"]
    m = a.merge(b, on=key, suffixes=("_a", "_b")).sort_values(key)
    m["same"] = m["token_id_a"] == m["token_id_b"]
    return m[m.groupby(["step", "update", "response_id"])["same"].cummin()]


@needs_browser
def test_comparison_pairs_tokens_and_filters_by_the_left_run(runs, tokenizer_dir, tmp_path):
    page = tmp_path / "vs.html"
    assert token_view.main([str(runs["bapo"]), "--vs", str(runs["ppo"]), "--tokenizer",
                            str(tokenizer_dir), "--out", str(page)]) == 0
    a, b = read_tokens(runs["bapo"]), read_tokens(runs["ppo"])
    step, update = 1, 1  # update 1 is stale: the bounds bind
    dom = open_in_browser(page, f"step={step}&update={update}&color=compare&filter=keptclip",
                          tmp_path)
    a_here, b_here = shown_rows(a, step, update), shown_rows(b, step, update)
    assert dom.keys(0) == keys(a_here) and dom.keys(1) == keys(b_here)
    pairs = expected_pairs(a_here, b_here)
    assert 0 < len(pairs) < len(a_here), "the divergence must leave some tokens unpaired"
    grad_a = ~pairs["clip_state_a"].isin(NO_GRADIENT_STATES)
    grad_b = ~pairs["clip_state_b"].isin(NO_GRADIENT_STATES)
    as_keys = lambda m, side: list(zip(m["response_id"], m["position"], m[f"token_id_{side}"],  # noqa: E731
                                       strict=True))
    kept_clipped = pairs[grad_a & ~grad_b]
    assert len(kept_clipped), "no token kept by bapo and clipped by ppo here"
    # the filter keeps the left run's matching tokens and their partners, nothing else
    assert dom.keys(0, without="out") == as_keys(kept_clipped, "a")
    assert dom.keys(1, without="out") == as_keys(kept_clipped, "b")
    # paired tokens whose gradient differs are outlined; tokens without a partner marked
    assert set(dom.keys(0, cls="flip")) == set(as_keys(pairs[grad_a != grad_b], "a"))
    paired_a = set(as_keys(pairs, "a"))
    assert set(dom.keys(0, cls="np")) == set(keys(a_here)) - paired_a


@needs_browser
def test_mismatch_colouring_marks_the_gap_and_the_rejected(runs, tokenizer_dir, tmp_path, capsys):
    """`color=mismatch`: each token by log(pi_old / mu), the behaviour pass against the
    sampler, in the bins of the legend; a token the correction rejected in the dark class,
    whatever its gap."""
    run = tmp_path / "mismatch" / "seed0"
    shutil.copytree(runs["bapo"], run)
    rows = read_tokens(run)
    gaps = np.array([-0.2, -0.05, 0.0, 0.05, 0.2])  # one per class: k0, k1, none, k3, k4
    rows["logp_sampler"] = (rows["logp_behavior"] - gaps[np.arange(len(rows)) % 5]).astype(np.float32)
    rows["rs_keep"] = rows["response_id"] % 7 != 0
    rows["is_weight"] = np.float32(1.0)
    write_tokens(run, rows)
    out = tmp_path / "view.html"
    code, err = build([run, "--tokenizer", tokenizer_dir, "--out", out], capsys)
    assert code == 0, err
    dom = open_in_browser(out, "step=1&update=1&color=mismatch", tmp_path)
    expected = shown_rows(read_tokens(run), 1, 1)
    d = expected["logp_behavior"] - expected["logp_sampler"]
    by_hand = np.select([~expected["rs_keep"], d < -0.1, d < -0.01, d < 0.01, d < 0.1],
                        ["k5", "k0", "k1", "", "k3"], "k4")
    assert set(by_hand) == {"k0", "k1", "", "k3", "k4", "k5"}  # every class occurs
    for k in ("k0", "k1", "k3", "k4", "k5"):
        assert dom.keys(0, cls=k) == keys(expected[by_hand == k]), k
