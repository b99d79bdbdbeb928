"""experiments/verify_cell.py's comparison: identical runs pass, any changed number is named."""

from __future__ import annotations

import json
import shutil

import pyarrow.compute as pc
import pyarrow.parquet as pq

from experiments import export_results as export
from experiments import verify_cell as verify


def test_compare_finds_nothing_on_a_rerun_and_names_each_change(tmp_path, write_run):
    run = write_run(tmp_path / "runs", "bapo", 4, 0, steps=3, tokens_per_step=320)
    committed = tmp_path / "results" / "cell"
    export.export_run(run.path, committed, 0.5, "cell")

    rerun = tmp_path / "rerun"
    shutil.copytree(run.path, rerun)
    # Timings differ between runs and are ignored.
    lines = [json.loads(x) for x in (rerun / "metrics.jsonl").read_text().splitlines()]
    for rec in lines:
        if rec["kind"] == "update":
            rec["time_update_s"] = 123.0
    (rerun / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert verify.compare_metrics(committed, rerun) == []
    assert verify.compare_tokens(committed, rerun) == []

    lines[3]["grad_norm"] = 0.5 if lines[3].get("grad_norm") != 0.5 else 0.25
    (rerun / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines[:-1]))
    problems = verify.compare_metrics(committed, rerun)
    assert problems[0] == f"metrics.jsonl: {len(lines)} committed records, {len(lines) - 1} rerun"
    assert problems[1].startswith("record 4 (") and "grad_norm" in problems[1]

    part = rerun / "tokens" / "step_000001.parquet"
    table = pq.read_table(part)
    entropy = pc.add(table["entropy"], 1e-3).cast(table.schema.field("entropy").type)
    table = table.set_column(table.schema.get_field_index("entropy"), "entropy", entropy)
    pq.write_table(table, part)
    assert verify.compare_tokens(committed, rerun) == ["tokens: column entropy differs"]
    part.unlink()
    assert "committed rows missing from the rerun" in verify.compare_tokens(committed, rerun)[0]
