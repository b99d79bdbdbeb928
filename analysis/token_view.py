"""A token viewer: one self-contained HTML page of a run's responses, token by token.

    python analysis/token_view.py RUN_DIR [--vs OTHER_RUN_DIR] [--step N ...] --out view.html
    python analysis/token_view.py experiments/results/staleness_4x/bapo/seed0 \\
        --vs experiments/results/staleness_4x/ppo/seed0 --out /tmp/view.html
    # then open file:///tmp/view.html#step=2&update=2&color=compare&filter=entinc,keptclip

The page shows the responses of a step's update grouped by prompt (group_id), each token as
its text (decoded with the run's warm-start tokenizer), coloured by clip state, IS ratio,
advantage sign, entropy, behaviour probability or lag; focus or hover shows a token's
numbers. Filters (AND-ed): clipped (no gradient), A>0, A<0, entropy-increasing (A>0 and
probability under pi_theta before the update below `lowp`: the "low p, A>0" kind of
analysis/figures/tokens.py, PROB_SPLIT by default), and with --vs: kept by the first run and
clipped by the other, the reverse, or either. A header per update counts tokens per clip
state by sign and gives the bounds (and an adaptive method's decision: rho before and after
its search). With --vs the two runs sit side by side, paired token by token (see
analysis/reports/token_data.py for what "paired" means and when it is the same sample).
The URL fragment holds the state, so a view can be linked: step, update, color
(clip|ratio|sign|entropy|prob|lag, and compare with --vs), filter (a comma list: clipped,
pos, neg, entinc, and with --vs keptclip, clipkept, differs), lowp, token=RESPONSE:POSITION
(selected and scrolled to). Exported runs keep a sample of whole responses; the page says so and how large.

The page opens from disk with no network: the data is one gzipped base64 blob of typed
columns (inflated by the browser's DecompressionStream) plus a JSON head holding each used
token id's text once. Every complete step goes into the page when the token rows of both
runs fit ROW_BUDGET; otherwise only the steps given with --step (default: the first).

Measured (benchmarks/bench_token_view.py, headless Chromium 150 on 2 busy CPU cores): the
committed 4x pair (bapo vs ppo seed 0, all 30 steps, 53K token rows) makes a 0.84 MiB page
that renders in 125-170 ms from navigation start (0.2-0.4 s to a painted screenshot beyond a
blank page's); one full-size 4x step of 128 responses (31K rows a run, both runs) 1.25 MiB
and 180-190 ms (0.65-0.95 s painted); a page at the row budget 2.5 MiB and 240-280 ms.

Bad input (a run dir without token rows, a step not logged, runs that do not pair, no
tokenizer) exits 2 with one line on stderr, before anything is written.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # `python analysis/token_view.py` puts only analysis/ there
    sys.path.insert(0, str(REPO))

from analysis.core.run_dirs import shown_path  # noqa: E402
from analysis.figures.tokens import PROB_SPLIT, SIGN_COLORS  # noqa: E402
from analysis.reports.token_data import (  # noqa: E402
    ViewError,
    ViewRun,
    check_configs_pair,
    check_tokens_pair,
    logged_steps,
    open_run,
    pair_rows,
    read_rows,
    run_info,
    update_records,
)
from analysis.reports.token_pack import Packer, pack_run  # noqa: E402
from analysis.reports.token_text import resolve_tokenizer, token_texts  # noqa: E402
from src.run_vocab import CLIP_STATE_NAMES, NO_GRADIENT_STATES  # noqa: E402

EXIT_BAD_INPUT = 2
# Token rows (both runs together) past which only the chosen steps go into the page: at 16-20
# bytes a row once packed (benchmarks/bench_token_view.py), a page stays under ~3 MiB.
ROW_BUDGET = 150_000
TEMPLATE = Path(__file__).parent / "reports" / "token_view.html"
SCRIPT = Path(__file__).parent / "reports" / "token_view.js"
_MARKER = re.compile(r"@@(TITLE|HEAD_JSON|DATA_B64|SCRIPT)@@")


# -- steps -----------------------------------------------------------------------------------

def spans(steps: list[int]) -> str:
    """'0-3, 7' for [0, 1, 2, 3, 7]."""
    parts, start = [], None
    for i, s in enumerate(steps):
        if start is None:
            start = s
        if i + 1 == len(steps) or steps[i + 1] != s + 1:
            parts.append(f"{start}" if start == s else f"{start}-{s}")
            start = None
    return ", ".join(parts) or "none"


def choose_steps(views: list[ViewRun], asked: list[int] | None) -> tuple[list[int], str | None]:
    """The steps the page holds, and a note when not all of them fit."""
    per_run = [logged_steps(v.rows) for v in views]
    common = sorted(set(per_run[0]).intersection(*per_run[1:]))
    if not common:
        raise ViewError("the runs do not pair: no step holds token rows in both")
    for step in asked or []:
        for view, steps in zip(views, per_run, strict=True):
            if step not in steps:
                raise ViewError(f"step {step} has no token rows in {view.path} (it holds "
                                f"steps {spans(steps)})")
    if asked:
        return sorted(set(asked)), None
    total = sum(int(v.rows["step"].isin(common).sum()) for v in views)
    if total <= ROW_BUDGET:
        return common, None
    note = (f"only step {common[0]}: all {len(common)} steps are {total:,} token rows, over the "
            f"page's budget of {ROW_BUDGET:,}; --step picks others")
    return [common[0]], note


# -- page --------------------------------------------------------------------------------------

def build_head(views: list[ViewRun], steps: list[int], steps_note: str | None,
               tokenizer_dir: Path, lowp: float, pairing: dict[str, Any] | None
               ) -> tuple[dict[str, Any], str]:
    """The page's JSON head and its base64 data blob."""
    for view in views:
        view.rows = view.rows[view.rows["step"].isin(steps)].reset_index(drop=True)
    partners: list[np.ndarray | None] = [None] * len(views)
    exact: list[np.ndarray | None] = [None] * len(views)
    if len(views) == 2:
        assert pairing is not None
        partners[0], partners[1], exact_a, pairing["paired"] = pair_rows(*views)
        exact[0] = exact_a
        exact[1] = np.zeros(len(views[1].rows), bool)
        exact[1][partners[0][partners[0] >= 0]] = exact_a[partners[0] >= 0]
    ids = np.unique(np.concatenate([v.rows["token_id"].to_numpy() for v in views]))
    texts = token_texts(tokenizer_dir, ids)
    packer = Packer()
    runs = []
    for i, view in enumerate(views):
        index = np.searchsorted(ids, view.rows["token_id"].to_numpy())
        info = run_info(view)
        info["cols"] = pack_run(packer, view.rows, index, partners[i], exact[i])
        info["rows"] = len(view.rows)
        info["updates"] = update_records(view, steps)
        runs.append(info)
    head = {
        "title": " vs ".join(v.label for v in views) + f", {views[0].run.experiment}",
        "runs": runs, "vocab": texts, "vocab_ids": ids.tolist(), "steps": steps,
        "steps_note": steps_note, "clip_states": list(CLIP_STATE_NAMES),
        "no_gradient": list(NO_GRADIENT_STATES), "lowp": lowp,
        "lowp_default": PROB_SPLIT, "sign_colors": SIGN_COLORS, "pairing": pairing,
        "tokenizer": shown_path(tokenizer_dir),
    }
    return head, packer.encoded()


def render_page(head: dict[str, Any], blob: str) -> str:
    # "<" escaped inside the JSON: no token text can close the script element.
    values = {"TITLE": _html_escape(head["title"]),
              "HEAD_JSON": json.dumps(head, separators=(",", ":")).replace("<", "\\u003c"),
              "DATA_B64": blob, "SCRIPT": SCRIPT.read_text()}
    return _MARKER.sub(lambda m: values[m.group(1)], TEMPLATE.read_text())


def _html_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the page from other readers
    os.replace(tmp, path)


def build(args: argparse.Namespace) -> tuple[str, str]:
    """The page and a one-line summary; every check runs before anything is written."""
    if not 0 < args.lowp < 1:
        raise ViewError(f"--lowp must be in (0, 1), got {args.lowp}")
    views = [open_run(args.run_dir)]
    if args.vs is not None:
        views.append(open_run(args.vs))
        if views[1].path.resolve() == views[0].path.resolve():
            raise ViewError("--vs names the same run dir")
        check_configs_pair(*views)
    for view in views:
        view.rows = read_rows(view)
    pairing = check_tokens_pair(*views) if len(views) == 2 else None
    steps, note = choose_steps(views, args.step)
    tokenizer_dir = resolve_tokenizer(views[0], args.tokenizer)
    head, blob = build_head(views, steps, note, tokenizer_dir, args.lowp, pairing)
    page = render_page(head, blob)
    rows = " + ".join(f"{len(v.rows):,}" for v in views)
    summary = f"steps {spans(steps)}, {rows} token rows, {len(page.encode()) / 2**20:.2f} MiB"
    return page, summary + (f" ({note})" if note else "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path)
    p.add_argument("--vs", type=Path, default=None,
                   help="a second run dir paired by seed (same task, model and seed), shown "
                        "side by side")
    p.add_argument("--step", type=int, action="append", default=None,
                   help="a step to put in the page (repeat for more; default: every step "
                        f"when the rows fit {ROW_BUDGET:,}, else the first)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tokenizer", type=Path, default=None,
                   help="the tokenizer dir (save_pretrained); default: the run's warm start")
    p.add_argument("--lowp", type=float, default=PROB_SPLIT,
                   help="entropy-increasing tokens: A>0 and probability under pi_theta below "
                        f"this (default {PROB_SPLIT}, analysis/figures/tokens.py PROB_SPLIT)")
    args = p.parse_args(argv)
    try:
        page, summary = build(args)
    except ViewError as e:
        print(f"token view: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    write_atomic(args.out, page)
    print(f"wrote {args.out}: {summary}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
