"""experiments/verify_cell.py's comparison: identical runs pass, any changed number is named."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from experiments import export_results as export
from experiments import verify_cell as verify
from src.run_files import METRICS_GZ, gzip_bytes, metrics_file, metrics_lines

ROOT = Path(__file__).resolve().parents[2]


def _write_records(run_dir: Path, records: list[dict]) -> None:
    """Rewrite a run dir's records in the form it holds (an export keeps them gzipped)."""
    text = "".join(json.dumps(r) + "\n" for r in records).encode()
    path = metrics_file(run_dir)
    path.write_bytes(gzip_bytes(text) if path.name == METRICS_GZ else text)


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
    _write_records(rerun, lines)
    assert verify.compare_metrics(committed, rerun) == []
    assert verify.compare_tokens(committed, rerun) == []
    assert verify.compare_tokens(run.path, rerun) == []  # a plain run dir as the reference
    # A key the committed records lack is newer telemetry: named, not a difference.
    for rec in lines:
        rec["masked_frac"] = 0.0
    _write_records(rerun, lines)
    assert verify.compare_metrics(committed, rerun) == []
    assert verify.added_metrics(committed, rerun) == ["masked_frac"]
    # A key the cell wrote as null and this run no longer writes is retired telemetry; a
    # retired key that held a number is still a difference.
    original = (committed / METRICS_GZ).read_bytes()  # an export keeps its records gzipped
    committed_lines = [json.loads(x) for x in metrics_lines(committed)]
    committed_lines[0]["retired"] = None
    _write_records(committed, committed_lines)
    assert verify.compare_metrics(committed, rerun) == []
    committed_lines[0]["retired"] = 1.0
    _write_records(committed, committed_lines)
    assert verify.compare_metrics(committed, rerun) == [
        f"record 1 ({committed_lines[0].get('kind')} step {committed_lines[0].get('step')}) "
        "retired: committed 1.0, this run None"]
    (committed / METRICS_GZ).write_bytes(original)

    lines[3]["grad_norm"] = 0.5 if lines[3].get("grad_norm") != 0.5 else 0.25
    _write_records(rerun, lines[:-1])
    problems = verify.compare_metrics(committed, rerun)
    assert problems[0] == (
        f"metrics.jsonl: {len(lines)} committed records, {len(lines) - 1} in this run"
    )
    assert problems[1].startswith("record 4 (") and "grad_norm" in problems[1]

    part = rerun / "tokens" / "step_000001.parquet"
    table = pq.read_table(part)
    entropy = pc.add(table["entropy"], 1e-3).cast(table.schema.field("entropy").type)
    table = table.set_column(table.schema.get_field_index("entropy"), "entropy", entropy)
    pq.write_table(table, part)
    assert verify.compare_tokens(committed, rerun) == ["tokens: column entropy differs"]
    part.unlink()
    assert "committed rows missing from this run" in verify.compare_tokens(committed, rerun)[0]


def _cli(*args):
    return subprocess.run([sys.executable, str(ROOT / "experiments" / "verify_cell.py"), *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.slow
def test_exit_codes_tell_a_missing_cell_from_a_difference(tmp_path, write_run):
    run = write_run(tmp_path / "runs", "bapo", 4, 0, steps=3, tokens_per_step=320)
    results = tmp_path / "results"
    export.export_run(run.path, results / "staleness_4x" / "bapo" / "seed0", 0.5, "cell")
    cell = ["staleness_4x/bapo/seed0", "--results", str(results)]

    same = _cli(*cell, "--compare-dir", str(run.path))
    assert same.returncode == 0, same.stderr
    assert "verdict: bit-identical" in same.stdout

    # Timings differ between any two runs and are ignored; a number is not.
    changed = tmp_path / "changed"
    shutil.copytree(run.path, changed)
    lines = [json.loads(x) for x in (changed / "metrics.jsonl").read_text().splitlines()]
    for rec in lines:
        if rec["kind"] == "update":
            rec["time_update_s"] = 99.0
    _write_records(changed, lines)
    assert _cli(*cell, "--compare-dir", str(changed)).returncode == 0
    lines[2]["loss"] = lines[2]["loss"] + 1.0
    _write_records(changed, lines)
    differs = _cli(*cell, "--compare-dir", str(changed))
    # one committed seed gives no interval to judge the difference by
    assert differs.returncode == 4 and "loss" in differs.stdout
    assert "differs; final greedy" in differs.stdout and "give no interval" in differs.stdout

    missing = _cli("staleness_4x/bapo/seed7", "--results", str(results))
    assert missing.returncode == 2 and "no committed cell staleness_4x/bapo/seed7" in missing.stderr
    assert _cli("nonsense", "--results", str(results)).returncode == 2
    no_run = _cli(*cell, "--compare-dir", str(tmp_path / "nowhere"))
    assert no_run.returncode == 2 and "not a run dir" in no_run.stderr
    # a run still going lacks its last records: refused, not judged
    (changed / "status.json").write_text(json.dumps({"status": "running", "last_step": 1}))
    going = _cli(*cell, "--compare-dir", str(changed))
    assert going.returncode == 2 and "is not finished (status.json: running)" in going.stderr


@pytest.mark.slow
def test_a_rerun_that_cannot_start_is_its_own_exit_code(tmp_path, write_run):
    run = write_run(tmp_path / "runs", "bapo", 4, 0, steps=3, tokens_per_step=320)
    results = tmp_path / "results"
    committed = results / "staleness_4x" / "bapo" / "seed0"
    export.export_run(run.path, committed, 0.5, "cell")
    meta = json.loads((committed / "meta.json").read_text())
    meta["overrides"] = ["seed=0", "method=bapo", "experiment=staleness_4x"]
    (committed / "meta.json").write_text(json.dumps(meta))
    # --out holds a run made with another config: src.run refuses it (exit 2) before any
    # work, so there is nothing to compare.
    # the cell made on a numerics family no machine has: the note comes before the rerun
    meta["numerics"] = {"mode": "portable", "cpu_vendor": "OtherVendor", "isa": "AVX2",
                        "mkl_branch": "AVX2", "cpu_model": "Other CPU"}
    meta["wall_time_s"], meta["threads"] = 318.05, 1
    (committed / "meta.json").write_text(json.dumps(meta))
    failed = _cli("staleness_4x/bapo/seed0", "--results", str(results), "--out", str(run.path))
    assert failed.returncode == 3, failed.stderr[-2000:]
    assert "holds a run made with another config" in failed.stderr
    assert "staleness_4x/bapo/seed0 failed (see above); nothing compared" in failed.stderr
    said = failed.stdout.splitlines()
    assert said[0].endswith(", about 5 min: its committed run trained for 318 s on Other CPU "
                            "with 1 thread(s), plus start-up and the final eval; a slower or "
                            "busier machine takes longer")
    assert said[1].startswith("  note: this cell was made on OtherVendor/AVX2/MKL AUTO; this "
                              "machine is ") and said[1].endswith(
        ": expect numbers inside the seeds' interval, not bit-identity (docs/numerics.md)")
    # the command as a user pastes it: `python`, not the interpreter's path, and no `$`
    assert said[2] == ("python -m src.run seed=0 method=bapo experiment=staleness_4x "
                       f"numerics=portable logger.progress=False hydra.run.dir={run.path}")


@pytest.mark.slow
def test_a_rerun_is_never_written_into_committed_results(tmp_path, write_run):
    run = write_run(tmp_path / "runs", "bapo", 4, 0, steps=3, tokens_per_step=320)
    inside = ROOT / "experiments" / "paper_grid" / "no_such_rerun"
    refused = _cli(str(run.path), "--out", str(inside))
    assert refused.returncode == 2 and not inside.exists()
    assert refused.stderr.strip() == (
        f"--out {inside} lies in committed results ({ROOT / 'experiments' / 'paper_grid'}), "
        "which a rerun never writes; give --out runs/paper_grid/no_such_rerun (or leave it "
        "out: a temporary dir)")


def test_a_rerun_on_another_numerics_family_is_told_what_to_expect():
    amd = {"mode": "portable", "cpu_vendor": "AuthenticAMD", "isa": "AVX2", "mkl_branch": "AVX2"}
    intel = {**amd, "cpu_vendor": "GenuineIntel"}
    # MKL runs its AUTO branch off Intel whatever MKL_CBWR says (src/_numerics.py)
    assert verify.family_note(amd, intel) == (
        "this cell was made on AuthenticAMD/AVX2/MKL AUTO; this machine is GenuineIntel/AVX2/MKL "
        "AVX2: expect numbers inside the seeds' interval, not bit-identity (docs/numerics.md)")
    assert verify.family_note(amd, {**amd, "cpu_model": "another AMD"}) is None  # one family
    assert verify.family_note(None, intel) is None  # made before fingerprints: nothing to say
    # a native cell is rerun natively, in a mode this process does not run in: not judged here
    assert verify.family_note({**amd, "mode": "native"}, intel) is None


def test_the_rerun_command_is_shown_as_a_user_pastes_it(tmp_path):
    cmd = [sys.executable, "-m", "src.run", "seed=0", "hydra.run.dir=/tmp/a dir/run"]
    shown = verify.shown_command(cmd)
    assert shown == "python -m src.run seed=0 'hydra.run.dir=/tmp/a dir/run'"
    import shlex

    assert shlex.split(shown) == ["python", *cmd[1:]]
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps({"wall_time_s": 89.6, "cpu": "x86_64", "threads": 2}))
    # 89.6 s rounds to 1 min; without a fingerprint the CPU is meta's own `cpu`
    assert verify.duration_note(tmp_path).startswith("about 1 min: its committed run trained "
                                                     "for 90 s on x86_64 with 2 thread(s)")
    meta.write_text(json.dumps({}))
    assert verify.duration_note(tmp_path) == "its committed run records no wall time"


def _set_evals(run_dir: Path, greedy: list[float]) -> None:
    """Give a run's eval records these greedy accuracies, in order."""
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in lines if r["kind"] == "eval"]
    assert len(evals) == len(greedy)
    for rec, value in zip(evals, greedy, strict=True):
        rec["greedy_accuracy"] = value
    _write_records(run_dir, lines)


def test_a_difference_is_judged_by_the_committed_seeds_interval(tmp_path, write_run):
    from analysis.core.stats import t975

    runs = [write_run(tmp_path / "runs", "bapo", 4, s, steps=4, evals_every=2) for s in range(3)]
    # three evals each (steps 0, 2, 4): "final" is their mean
    finals = {0: [0.3, 0.4, 0.5], 1: [0.3, 0.5, 0.6], 2: [0.3, 0.6, 0.6]}
    for s, values in finals.items():
        _set_evals(runs[s].path, values)
    means = [sum(v) / 3 for v in finals.values()]
    assert verify.final_greedy(runs[1].path) == pytest.approx(means[1])
    m = sum(means) / 3
    sd = (sum((x - m) ** 2 for x in means) / 2) ** 0.5
    half = t975(2) * sd / 3 ** 0.5
    mean, low, high, n = verify.seed_interval(runs[0].path)
    assert (n, mean) == (3, pytest.approx(m)) and (low, high) == (pytest.approx(m - half), pytest.approx(m + half))

    rerun = tmp_path / "rerun"
    shutil.copytree(runs[0].path, rerun)
    assert verify.verdict(runs[0].path, rerun, []) == (verify.EXIT_IDENTICAL, "bit-identical")
    _set_evals(rerun, [0.3, 0.45, 0.55])  # final 0.433: inside [m - half, m + half]
    code, line = verify.verdict(runs[0].path, rerun, ["a difference"])
    assert code == verify.EXIT_INSIDE and line.startswith("differs, inside the committed seeds' interval")
    _set_evals(rerun, [0.3, 0.95, 0.95])  # final 0.733: far above
    code, line = verify.verdict(runs[0].path, rerun, ["a difference"])
    assert code == verify.EXIT_OUTSIDE and line.startswith("differs, outside")


def test_the_rerun_is_the_command_that_made_the_run_in_its_mode(tmp_path, write_run):
    run = write_run(tmp_path / "runs", "bapo", 4, 1, steps=2)
    meta = json.loads((run.path / "meta.json").read_text())
    meta["overrides"] = ["seed=1", "method=bapo", "experiment=delay_64", "train.threads=1",
                         "logger.progress=false"]
    (run.path / "meta.json").write_text(json.dumps(meta))
    cmd = verify.rerun_command(run.path, tmp_path / "out")
    # a run made before the mode existed records none: reruns take the portable default
    assert cmd[1:] == ["-m", "src.run", "seed=1", "method=bapo", "experiment=delay_64",
                       "train.threads=1", "numerics=portable", "logger.progress=False",
                       f"hydra.run.dir={tmp_path / 'out'}"]
    meta["numerics"] = {"mode": "native"}
    (run.path / "meta.json").write_text(json.dumps(meta))
    assert "numerics=native" in verify.rerun_command(run.path, tmp_path / "out")


def test_a_dir_of_runs_is_every_run_below_it_and_bad_paths_are_named(tmp_path, write_run):
    runs = [write_run(tmp_path / "root", m, 4, s, steps=2) for m in ("ppo", "bapo") for s in (0, 1)]
    assert verify.find_runs(tmp_path / "root") == sorted(r.path for r in runs)
    assert verify.find_runs(runs[0].path) == [runs[0].path]
    out = _cli(str(tmp_path / "nowhere"))
    assert out.returncode == 2 and "not a run dir, a dir of run dirs" in out.stderr
    (tmp_path / "empty").mkdir()
    out = _cli(str(tmp_path / "empty"))
    assert out.returncode == 2 and "no committed run below it" in out.stderr
    out = _cli(str(tmp_path / "root"), "--compare-dir", str(runs[0].path))
    assert out.returncode == 2 and "--out and --compare-dir take one cell; 4 were given" in out.stderr


def test_a_rerun_that_differs_only_in_the_samplers_log_probs_is_named_so(tmp_path, write_run,
                                                                          capsys):
    run = write_run(tmp_path / "runs", "bapo", 4, 0, steps=3, tokens_per_step=320)
    rerun = tmp_path / "rerun"
    shutil.copytree(run.path, rerun)
    lines = [json.loads(x) for x in (rerun / "metrics.jsonl").read_text().splitlines()]
    for rec in lines:
        if rec["kind"] == "step":
            rec["sampler_logp_gap"] = 3.2e-7 if rec.get("sampler_logp_gap") != 3.2e-7 else 3.3e-7
    _write_records(rerun, lines)
    part = rerun / "tokens" / "step_000001.parquet"
    table = pq.read_table(part)
    shifted = pc.add(table["logp_sampler"], 1e-6).cast(table.schema.field("logp_sampler").type)
    pq.write_table(table.set_column(table.schema.get_field_index("logp_sampler"), "logp_sampler",
                                    shifted), part)
    code = verify.check_one(run.path, rerun, "cell")
    assert code == verify.EXIT_IDENTICAL
    assert "only the sampler's own log-probs (diagnostic) differ" in capsys.readouterr().out
    # the same difference in a number training uses is a difference
    table = pq.read_table(part)
    moved = pc.add(table["logp_behavior"], 1e-6).cast(table.schema.field("logp_behavior").type)
    pq.write_table(table.set_column(table.schema.get_field_index("logp_behavior"), "logp_behavior",
                                    moved), part)
    assert verify.check_one(run.path, rerun, "cell") == verify.EXIT_OUTSIDE  # one seed: no interval


def _with_column(path: Path, name: str, values: list[float]) -> None:
    table = pq.read_table(path)
    column = pa.array(values, type=pa.float32())
    if name in table.column_names:
        table = table.set_column(table.schema.get_field_index(name), name, column)
    else:
        table = table.append_column(name, column)
    pq.write_table(table, path)


def test_nan_equals_nan_in_a_token_column_and_nothing_else_does(tmp_path, write_run):
    # is_weight is NaN on every row of a run without a correction: a rerun must still pass
    run = write_run(tmp_path / "runs", "ppo", 4, 0, steps=2, tokens_per_step=64)
    rerun = tmp_path / "rerun"
    shutil.copytree(run.path, rerun)
    for a, b in zip(sorted((run.path / "tokens").glob("*.parquet")),
                    sorted((rerun / "tokens").glob("*.parquet")), strict=True):
        n = pq.read_metadata(a).num_rows
        _with_column(a, "is_weight", [math.nan] * n)
        _with_column(b, "is_weight", [math.nan] * n)
    assert verify.compare_tokens(run.path, rerun) == []
    part = sorted((rerun / "tokens").glob("*.parquet"))[0]
    n = pq.read_metadata(part).num_rows
    _with_column(part, "is_weight", [1.0] + [math.nan] * (n - 1))  # a number where NaN was
    assert verify.compare_tokens(run.path, rerun) == ["tokens: column is_weight differs"]


def test_a_token_column_the_compared_run_does_not_write_is_named_not_a_crash(tmp_path, write_run):
    # comparing a committed cell with a run of older code (--compare-dir): the column it
    # predates is named, and every column both have is still compared
    run = write_run(tmp_path / "runs", "ppo", 4, 0, steps=2, tokens_per_step=64)
    older = tmp_path / "older"
    shutil.copytree(run.path, older)
    for part in sorted((run.path / "tokens").glob("*.parquet")):
        _with_column(part, "is_weight", [1.0] * pq.read_metadata(part).num_rows)
    assert verify.compare_tokens(run.path, older) == [
        "tokens: column is_weight is not written by this run"]
    part = sorted((older / "tokens").glob("*.parquet"))[0]
    _with_column(part, "entropy", [0.5] * pq.read_metadata(part).num_rows)
    assert verify.compare_tokens(run.path, older) == [
        "tokens: column entropy differs", "tokens: column is_weight is not written by this run"]
