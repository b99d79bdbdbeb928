"""The project's tasks as engine data: verl parquet files and a verl reward function.

verl reads prompts from parquet (`data.train_files`) and scores responses with
`reward.custom_reward_function.{path,name}`. `export_verl_parquet` writes a task's
training and held-out problems in verl's RL format (chat prompt, `reward_model.
ground_truth`, `extra_info` naming the task and problem), and `compute_score` rebuilds the
problem from `extra_info` and calls the task's own verifier, so rewards are the project's.

    python -m src.integrations.tasks --task arithmetic --out data/arithmetic --train 50000 --val 256
"""

from __future__ import annotations

import argparse
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

DATA_SOURCE_PREFIX = "bapo_repro/"


@lru_cache(maxsize=8)
def _task(name: str, params_json: str):
    from src.tasks import get_task
    return get_task(name, **json.loads(params_json))


_EVAL_CACHE: dict[tuple[str, str], list] = {}


def _problem(info: dict[str, Any]):
    name, params = info["task"], info.get("params") or "{}"
    task = _task(name, params)
    index = int(info["index"])
    if info.get("split", "train") == "train":
        return task.problem(index)
    cached = _EVAL_CACHE.get((name, params), [])
    if len(cached) <= index:
        cached = task.eval_problems(max(index + 1, 2 * len(cached)))
        _EVAL_CACHE[(name, params)] = cached
    return cached[index]


def verl_records(task_name: str, split: str, n: int, *, params: dict | None = None,
                 start: int = 0) -> list[dict[str, Any]]:
    """`n` problems of `split` (train | eval) as verl RL rows."""
    params_json = json.dumps(params or {}, sort_keys=True)
    task = _task(task_name, params_json)
    if split == "train":
        problems = [task.problem(start + i) for i in range(n)]
    elif split == "eval":
        problems = task.eval_problems(n)
    else:
        raise ValueError(f"split must be train or eval, got {split!r}")
    return [{"data_source": f"{DATA_SOURCE_PREFIX}{task_name}",
             "prompt": [{"role": "user", "content": p.prompt}],
             "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": p.answer},
             "extra_info": {"task": task_name, "params": params_json, "split": split,
                            # train: the problem's index; eval: its position in eval_problems(n)
                            "index": p.index if split == "train" else i}}
            for i, p in enumerate(problems)]


def export_verl_parquet(out_dir: str | Path, task_name: str = "arithmetic", *, n_train: int,
                        n_val: int, params: dict | None = None, start: int = 0) -> tuple[Path, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for split, n, name in (("train", n_train, "train.parquet"), ("eval", n_val, "val.parquet")):
        rows = verl_records(task_name, split, n, params=params, start=start)
        pq.write_table(pa.Table.from_pylist(rows), out / name)
        paths.append(out / name)
    return paths[0], paths[1]


def compute_score(data_source: str, solution_str: str, ground_truth: str,
                  extra_info: dict | None = None, **_: Any) -> float:
    """verl custom reward: the project task's own verifier."""
    if not extra_info or "task" not in extra_info:
        raise ValueError(f"{data_source}: extra_info lacks the task; export the data with "
                         "src.integrations.tasks.export_verl_parquet")
    problem = _problem(extra_info)
    return float(_task(extra_info["task"], extra_info.get("params") or "{}").score(problem, solution_str))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--task", default="arithmetic")
    p.add_argument("--params", default="{}", help="task params as JSON")
    p.add_argument("--out", required=True)
    p.add_argument("--train", type=int, default=50_000)
    p.add_argument("--val", type=int, default=256)
    p.add_argument("--start", type=int, default=0, help="first training problem index")
    ns = p.parse_args(argv)
    train, val = export_verl_parquet(ns.out, ns.task, n_train=ns.train, n_val=ns.val,
                                     params=json.loads(ns.params), start=ns.start)
    print(f"wrote {train} and {val}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
