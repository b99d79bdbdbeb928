"""Size and time to first render of analysis/token_view.py's pages, in headless Chromium.

    python benchmarks/bench_token_view.py [--repeats 3] [--keep DIR]

Cases (each a comparison, --vs, so two runs' rows are in the page):
- committed: experiments/results/staleness_4x/bapo/seed0 vs ppo/seed0, every one of its 30
  steps (the exported 20% samples of responses); needs the runs' warm-start tokenizer
  (left out, with a note, when it cannot be found).
- step4x: one synthetic staleness-4 step at full size, 16 prompts x 8 responses of 40-80
  tokens, each response in all 4 updates (train.staleness_mode=fixed_update): ~30K token
  rows per run.
- budget: synthetic runs of several such steps, at the page's row budget (ROW_BUDGET over
  both runs), every step in the page.

Per case: the build's wall time (a fresh process, imports included), the page's size, and
the medians over --repeats Chromium launches of the page's own measure (performance.now()
when its first render ends: from navigation start through parsing the file, inflating the
data and drawing one update; body[data-render-ms]) and of a screenshot launch's wall time
less a blank page's (up to pixels on screen: loading, rendering, painting). The synthetic
runs come from the test suite's writer (tests/analysis/conftest.py) with token rows made
here; their random floats pack worse than real runs' (20 against 16 bytes a row).

Measured on 2 CPU cores shared with other work (load average 3.4-4.6), Chromium 150,
--repeats 3, two runs a minute apart (the first's numbers, then the second's):

| case | token rows (both runs) | build s | page MiB | rendered ms | screenshot - blank ms |
|---|---|---|---|---|---|
| committed 4x pair, 30 steps | 53,494 | 3.9, 5.7 | 0.84 | 125, 166 | 186, 370 |
| step4x, one step | 61,872 | 4.4, 6.3 | 1.25 | 182, 189 | 647, 959 |
| budget, 2 steps | 124,192 | 4.7, 4.9 | 2.46 | 278, 239 | 828, 742 |

The shown update's size sets the drawing time: step4x draws 2 x 128 responses (15K token
spans) at once, the committed pair's update about 2 x 6 (its 20% sample).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from _setup import REPO as ROOT  # this checkout first on sys.path

from analysis.token_view import ROW_BUDGET  # noqa: E402
from src.telemetry import TOKEN_SCHEMA  # noqa: E402

COMMITTED = ROOT / "experiments/results/staleness_4x"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--virtual-time-budget=5000"]
GROUPS, GROUP_SIZE, UPDATES = 16, 8, 4


def _writer():
    # conftest.py is not importable as a module name; load it from its path.
    spec = importlib.util.spec_from_file_location("token_view_synth",
                                                  ROOT / "tests/analysis/conftest.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod.write_run


def synthetic_rows(steps: int, vocab: int, seed: int, c_low: float, c_high: float) -> pd.DataFrame:
    """Full-size steps: every response in every update (fixed_update), drifting ratios."""
    gen = np.random.default_rng(seed)
    tokens_rng = np.random.default_rng(0)  # the same samples in both runs: they pair
    frames = []
    for step in range(steps):
        n_resp = GROUPS * GROUP_SIZE
        lengths = tokens_rng.integers(40, 81, n_resp)
        ids = [tokens_rng.integers(3, vocab, n) for n in lengths]
        reward = tokens_rng.integers(0, 2, n_resp).astype(np.float32)
        by_group = reward.reshape(GROUPS, GROUP_SIZE)
        adv = ((by_group - by_group.mean(1, keepdims=True)) / (by_group.std(1, keepdims=True) + 1e-6)).ravel()
        for update in range(UPDATES):
            rid = np.repeat(np.arange(n_resp), lengths)
            n = len(rid)
            logp_b = np.log(tokens_rng.uniform(0.02, 1.0, n))
            logp = np.minimum(logp_b + gen.normal(0, 0.1 * update, n), 0.0)
            ratio = np.exp(logp - logp_b)
            a = adv[rid]
            state = np.where((a > 0) & (ratio > c_high), "clip_high",
                             np.where((a < 0) & (ratio < c_low), "clip_low", "none"))
            frames.append(pd.DataFrame({
                "step": step, "update": update, "response_id": rid, "group_id": rid // GROUP_SIZE,
                "position": np.concatenate([np.arange(k) for k in lengths]),
                "token_id": np.concatenate(ids), "logp_behavior": logp_b, "logp_sampler": logp_b,
                "logp": logp, "ratio": ratio, "advantage": a, "entropy": gen.exponential(0.3, n),
                "clip_state": state, "in_loss": True, "c_low": c_low, "c_high": c_high,
                "reward": reward[rid], "response_length": lengths[rid],
                "policy_version": step * UPDATES, "lag": update}))
    return pd.concat(frames, ignore_index=True)


def synthetic_pair(root: Path, steps: int, vocab: int) -> list[Path]:
    write_run = _writer()
    paths = []
    for method, bounds in (("bapo", (0.7, 1.9)), ("ppo", (0.8, 1.2))):
        run = write_run(root, method, staleness=UPDATES, seed=0, steps=steps, tokens_per_step=64)
        for part in (run.path / "tokens").glob("*.parquet"):
            part.unlink()
        rows = synthetic_rows(steps, vocab, seed=len(paths), c_low=bounds[0], c_high=bounds[1])
        for step, part in rows.groupby("step"):
            table = pa.Table.from_pandas(part, preserve_index=False).select(TOKEN_SCHEMA.names)
            pq.write_table(table.cast(TOKEN_SCHEMA), run.path / "tokens" / f"step_{step:06d}.parquet")
        paths.append(run.path)
    return paths


def small_tokenizer(path: Path) -> Path:
    from src.models.tokenizer import train_tokenizer
    from src.tasks import get_task

    train_tokenizer(get_task("arithmetic", seed=0).corpus(2000), 320).save_pretrained(path)
    return path


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        raise SystemExit("no chromium on PATH (Debian: apt-get install chromium)")
    return found


def render_ms(binary: str, url: str) -> int | None:
    """The page's own data-render-ms, read from its dumped DOM."""
    with tempfile.TemporaryDirectory() as profile:
        out = subprocess.run([binary, *CHROMIUM_FLAGS, "--dump-dom", f"--user-data-dir={profile}",
                              url], capture_output=True, text=True, timeout=120).stdout
    if 'id="errors" hidden' not in out:
        raise SystemExit(f"{url}: the page reported a script error")
    found = re.search(r'data-render-ms="(\d+)"', out)
    return int(found.group(1)) if found else None


def screenshot_seconds(binary: str, url: str) -> float:
    """Wall seconds of a launch that loads the page and saves a screenshot of it painted."""
    with tempfile.TemporaryDirectory() as profile:
        t = time.perf_counter()
        subprocess.run([binary, *CHROMIUM_FLAGS, "--window-size=1400,900",
                        f"--screenshot={profile}/shot.png", f"--user-data-dir={profile}", url],
                       capture_output=True, timeout=120, check=True)
        return time.perf_counter() - t


def measure(name: str, argv: list[str], rows: int, out: Path, repeats: int, blank_s: float,
            binary: str) -> dict:
    t = time.perf_counter()
    subprocess.run([sys.executable, str(ROOT / "analysis/token_view.py"), *argv, "--out", str(out)],
                   check=True, capture_output=True)
    build_s = time.perf_counter() - t
    url = out.as_uri() + "#color=compare"
    walls, renders = [], []
    for _ in range(repeats):
        renders.append(render_ms(binary, url))
        walls.append(screenshot_seconds(binary, url))
    return {"case": name, "rows": rows, "build_s": round(build_s, 1),
            "page_mib": round(out.stat().st_size / 2**20, 2),
            "render_ms": statistics.median(renders),
            "shot_minus_blank_ms": round(1000 * (statistics.median(walls) - blank_s))}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--keep", type=Path, help="write the run dirs and pages here and keep them")
    args = p.parse_args()
    binary = chromium()
    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep or Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        blank = base / "blank.html"
        blank.write_text("<!DOCTYPE html><html><body><pre id=\"errors\" hidden></pre></body></html>")
        blank_s = statistics.median(screenshot_seconds(binary, blank.as_uri())
                                    for _ in range(args.repeats))
        tok = small_tokenizer(base / "tokenizer")
        vocab = len(json.loads((tok / "tokenizer.json").read_text())["model"]["vocab"])
        results = []
        committed = [COMMITTED / "bapo/seed0", COMMITTED / "ppo/seed0"]
        rows = sum(pq.read_metadata(d / "tokens/sampled.parquet").num_rows for d in committed)
        try:
            results.append(measure("committed 4x pair, 30 steps", [str(committed[0]), "--vs",
                                   str(committed[1])], rows, base / "committed.html",
                                   args.repeats, blank_s, binary))
        except subprocess.CalledProcessError as e:
            print(f"committed pair left out: {e.stderr.decode().strip()}")
        pair_rows = None  # token rows of one full step, both runs
        for case, steps in (("step4x", 1), ("budget", None)):
            if steps is None:  # as many full steps as the page's budget holds
                steps = max(1, ROW_BUDGET // pair_rows)
            pair = synthetic_pair(base / case, steps, vocab)
            rows = sum(pq.read_metadata(part).num_rows for run in pair
                       for part in (run / "tokens").glob("*.parquet"))
            pair_rows = pair_rows or rows
            label = "step4x, one step" if case == "step4x" else f"budget, {steps} steps"
            results.append(measure(label, [str(pair[0]), "--vs", str(pair[1]), "--tokenizer",
                                           str(tok)], rows, base / f"{case}.html",
                                   args.repeats, blank_s, binary))
    print(f"a blank page's screenshot launch: {blank_s:.2f} s")
    print("| case | token rows (both runs) | build s | page MiB | rendered ms "
          "| screenshot - blank ms |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['case']} | {r['rows']:,} | {r['build_s']} | {r['page_mib']} | {r['render_ms']} "
              f"| {r['shot_minus_blank_ms']} |")
    return 0


if __name__ == "__main__":
    from src.pinning import pin_process

    pin_process()  # as the src import did before; its build processes inherit the pins
    raise SystemExit(main())
