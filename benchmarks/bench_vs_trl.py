"""The project's trainer against stock TRL GRPOTrainer and the TRL plug, on the same work.

    python benchmarks/bench_vs_trl.py                      # the race: 2 rounds, 10 timed steps
    python benchmarks/bench_vs_trl.py --scaling            # step time vs response length / batch
    python benchmarks/bench_vs_trl.py --engines project,project@OMP_WAIT_POLICY=PASSIVE
    python benchmarks/bench_vs_trl.py --experiment smol_4x --threads 1 --steps 2 --warmup 1 \
        --engines process:rollout.behaviour=sampler,trl   # the pretrained testbed (SmolLM2-135M)

The same work for every engine: the cached tiny warm start of the default config, the same
training prompts in the same order, `--prompts` x `--group-size` responses of at most
`--max-new-tokens` tokens per rollout, staleness `--staleness` (one optimizer update per
mini-batch), AdamW at lr 5e-5 constant, fp32, `--threads` threads, no eval. With
`--experiment E` the work is that experiment's instead (its model, task, chat-formatted
prompts, sizes and learning rate; a size flag given on the command line still wins): for
`smol_4x`, SmolLM2-135M-Instruct from its GGUF file, dequantized to fp32 on load. Engines:

- `project`: `src.trainer.Trainer.train_step`, built as `python -m src.run` builds it (its
  run dir with token rows goes to a scratch dir);
- `trl`: stock `trl.GRPOTrainer` (beta 0, epsilon 0.2, loss_type dapo = token mean, group
  std-normalised rewards, top_k 0, bf16 and gradient checkpointing off, unshuffled prompts);
- `plug`: the project's `ProjectGRPOTrainer` with the same TRL arguments and its run dir;
- `process`: a whole `python -m src.run` process with the same work and the quick start's
  defaults for everything else (progress bar, token rows, evals every 10 steps, checkpoints
  every 10), timed on its own step clock (`time_*_s` in metrics.jsonl) and on the wall clock
  of the whole process (start-up, model load, evals and checkpoints included: the `wall`
  columns). `process:KEY=VALUE[:KEY=VALUE]` adds Hydra overrides, to take one cost away at a
  time (e.g. `process:eval.every=1000:checkpoint.every=1000`).

`ENGINE@VAR=VALUE[@VAR=VALUE]` runs an engine with extra environment variables (set
before torch loads), e.g. OpenMP wait policies. The project's engines import `src` before
torch, as `python -m src.run` does (so whatever src/pinning.py sets applies to them); stock
TRL loads torch first, with the environment as it is. Each engine runs in its own process; rounds
alternate the engines, so a change in the machine's load hits all of them alike. Per step:
generation (sampling the rollout), behaviour pass (the no-grad scoring of the behaviour
log-probs), updates (everything else of the step: rewards, advantages, the optimizer
updates, logging), and generated tokens (response tokens, EOS included) per second of step.
Medians over rounds are printed, and the ratios of tokens per second last.

`--force-length` makes every response `--max-new-tokens` long (EOS masked until then:
`min_new_tokens` in both samplers) and raises the loaded model's declared
`max_position_embeddings` to 1024 (its rotary embedding has no position table, so no weight
or op changes): a timing-only setting for the scaling table, since the warm start stops
after ~35 tokens and declares 128 positions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _setup import REPO  # this checkout first on sys.path; loads nothing of it

from src.run_files import metrics_records

ENGINES = ("project", "trl", "plug", "process")
# The tiny default's work; --experiment takes an experiment's sizes and rate instead.
TINY_WORK = {"prompts": 16, "group_size": 8, "max_new_tokens": 64, "staleness": 4, "lr": 5e-5}


# -- one engine, in a child process -------------------------------------------------------

def _work_overrides(a) -> list[str]:
    """The race's work as Hydra overrides, the same for every engine."""
    experiment = [f"experiment={a.experiment}"] if a.experiment else []
    return [*experiment, f"method={a.method}", f"train.staleness={a.staleness}",
                 f"train.prompts_per_step={a.prompts}", f"train.group_size={a.group_size}",
                 f"rollout.max_new_tokens={a.max_new_tokens}", f"train.threads={a.threads}",
                 # AdamW, as TRL's trainer uses: the CPU default is SGD, which would race
                 # a cheaper optimizer step against TRL's
                 "train.optimizer=adamw", f"train.lr={a.lr}", f"cache_dir={a.cache_dir}"]


def fill_work(a) -> None:
    """The sizes and rate not given on the command line: the experiment's (composed as the
    project composes it, so TRL gets the same numbers), else the tiny default's."""
    if all(getattr(a, key) is not None for key in TINY_WORK):
        return  # a child: the parent passed every value (and composing would load torch early)
    work = dict(TINY_WORK)
    if a.experiment:
        from src.build import compose_config

        cfg = compose_config([f"experiment={a.experiment}"])
        work = {"prompts": cfg.train.prompts_per_step, "group_size": cfg.train.group_size,
                "max_new_tokens": cfg.rollout.max_new_tokens, "staleness": cfg.train.staleness,
                "lr": cfg.train.lr}
    for key, value in work.items():
        if getattr(a, key) is None:
            setattr(a, key, value)


def _project_config(a):
    from src.build import compose_config

    return compose_config([*_work_overrides(a), "logger.progress=false"])


def _model(cfg, a):
    import torch

    from src.build import build_model, build_task

    task = build_task(cfg.task)
    model, tokenizer, info = build_model(cfg.model, task, torch.device("cpu"), progress=False,
                                         cache_dir=cfg.cache_dir, numerics=cfg.numerics)
    if a.force_length:
        model.config.max_position_embeddings = 1024
    return task, model, tokenizer, int(info.get("next_train_index", 0))


def run_project(a) -> list[dict]:
    import torch

    from src.build import attach_trainer, build_parts
    from src.telemetry import RunWriter

    cfg = _project_config(a)
    if a.force_length:
        cfg.rollout.params = {**dict(cfg.rollout.params), "min_new_tokens": a.max_new_tokens}
    parts = build_parts(cfg, device=torch.device("cpu"), progress=False)
    if a.force_length:
        parts.model.config.max_position_embeddings = 1024  # as _model does for TRL's engines
    run_dir = Path(tempfile.mkdtemp(prefix="bench-project-"))
    writer = RunWriter(run_dir, {}, {}, resume_at_step=-1)
    trainer = attach_trainer(parts, writer, run_dir / "checkpoints", evaluate="none")
    state = parts.fresh_state()
    steps = []
    for _ in range(a.warmup + a.steps):
        rec = trainer.train_step(state)
        state.step += 1
        gen, behaviour, total = rec["time_rollout_s"], rec["time_behavior_s"], rec["time_step_s"]
        steps.append({"step": total, "generation": gen, "behaviour": behaviour,
                      "updates": total - gen - behaviour,
                      "tokens": rec["response_length_mean"] * a.prompts * a.group_size})
    writer.close()
    return steps[a.warmup:]


def run_process(a) -> list[dict]:
    """`python -m src.run` as a user starts it; per step its own clock, and the whole
    process's wall clock spread over the steps (`wall`), so that tokens over the summed
    `wall` is tokens per second of the process's life."""
    run_dir = Path(tempfile.mkdtemp(prefix="bench-process-")) / "run"
    steps_total = a.warmup + a.steps
    cmd = [sys.executable, "-m", "src.run", *_work_overrides(a), f"train.steps={steps_total}",
           *a.process_overrides, f"hydra.run.dir={run_dir}"]
    t0 = time.perf_counter()
    # a timing run: overrides may turn both evals off (src/preflight.py ENV_NO_EVAL)
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "REPRO_NO_EVAL": "1"})
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"python -m src.run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    records = metrics_records(run_dir)
    steps = []
    for rec in (r for r in records if r["kind"] == "step"):
        gen, behaviour, total = rec["time_rollout_s"], rec["time_behavior_s"], rec["time_step_s"]
        steps.append({"step": total, "generation": gen, "behaviour": behaviour,
                      "updates": total - gen - behaviour, "wall": wall / steps_total,
                      "tokens": rec["response_length_mean"] * a.prompts * a.group_size})
    return steps[a.warmup:]


def run_trl(a, plug: bool) -> list[dict]:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from src.build import prompt_formatter

    cfg = _project_config(a)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    task, model, tokenizer, start = _model(cfg, a)
    n_rollouts = a.warmup + a.steps
    problems = [task.problem(start + i) for i in range(n_rollouts * a.prompts)]
    # the prompt text the project's trainer samples from: chat-templated for an instruct model
    # (a plain string, so TRL adds no template of its own), raw for the tiny one
    format_prompt = prompt_formatter(cfg.model, tokenizer)
    dataset = Dataset.from_list([{"prompt": format_prompt(p.prompt), "problem_index": i}
                                 for i, p in enumerate(problems)])
    if getattr(model, "is_quantized", False):
        # A GGUF file is dequantized to plain fp32 tensors on load, but transformers keeps
        # the model marked quantized, and Trainer refuses to train a quantized model without
        # adapters. The weights are ordinary fp32 parameters, as the project trains them.
        model.is_quantized, model.hf_quantizer = False, None

    def reward(completions, problem_index, **_):
        return [task.score(problems[i], c) for c, i in zip(completions, problem_index, strict=True)]

    batch = a.prompts * a.group_size
    out_dir = Path(tempfile.mkdtemp(prefix="bench-trl-"))
    args = GRPOConfig(
        output_dir=str(out_dir), per_device_train_batch_size=batch // a.staleness,
        steps_per_generation=a.staleness, gradient_accumulation_steps=1, num_iterations=1,
        num_generations=a.group_size, max_completion_length=a.max_new_tokens,
        max_steps=n_rollouts * a.staleness, learning_rate=a.lr, lr_scheduler_type="constant",
        warmup_steps=0, max_grad_norm=1.0, weight_decay=0.0, beta=0.0, epsilon=0.2,
        loss_type="dapo", scale_rewards="group", temperature=1.0, top_p=1.0, top_k=0,
        bf16=False, gradient_checkpointing=False, use_cpu=True, shuffle_dataset=False,
        save_strategy="no", report_to="none", disable_tqdm=True, dataloader_num_workers=0,
        seed=0, generation_kwargs={"min_new_tokens": a.max_new_tokens} if a.force_length else None)
    times = {"generation": 0.0, "behaviour": 0.0, "start": None, "tokens": 0}
    steps: list[dict] = []

    if plug:
        from src.integrations.trl_grpo import ProjectGRPOTrainer as base
        extra = {"method": a.method, "run_dir": out_dir / "run"}
    else:
        base, extra = GRPOTrainer, {}

    class Timed(base):
        def _generate_and_score_completions(self, inputs):
            times.update(generation=0.0, behaviour=0.0, start=time.perf_counter())
            out = super()._generate_and_score_completions(inputs)
            times["tokens"] = int(out["completion_mask"].sum())
            return out

        def _generate(self, prompts):
            t0 = time.perf_counter()
            out = super()._generate(prompts)
            times["generation"] += time.perf_counter() - t0
            return out

        def _get_per_token_logps_and_entropies(self, *args, **kwargs):
            if torch.is_grad_enabled():
                return super()._get_per_token_logps_and_entropies(*args, **kwargs)
            t0 = time.perf_counter()
            out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
            times["behaviour"] += time.perf_counter() - t0
            return out

    class RolloutEnd(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % a.staleness == 0:
                total = time.perf_counter() - times["start"]
                steps.append({"step": total, "generation": times["generation"],
                              "behaviour": times["behaviour"],
                              "updates": total - times["generation"] - times["behaviour"],
                              "tokens": times["tokens"]})

    trainer = Timed(model=model, reward_funcs=reward, args=args, train_dataset=dataset,
                    processing_class=tokenizer, callbacks=[RolloutEnd()], **extra)
    trainer.train()
    return steps[a.warmup:]


def child(a) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    if a.child == "trl":
        import torch  # noqa: F401 - stock TRL: torch loads before any project code
    else:
        from src.pinning import pin_process

        pin_process()  # as `python -m src.run` does: the project's pins first
    if a.child == "process":
        steps = run_process(a)
    else:
        steps = run_project(a) if a.child == "project" else run_trl(a, plug=a.child == "plug")
    print("BENCH " + json.dumps(steps), flush=True)


# -- the race, in the parent --------------------------------------------------------------

def _parse_engine(engine: str) -> tuple[str, dict[str, str], list[str]]:
    """`NAME[:KEY=VALUE...][@VAR=VALUE...]` -> (name, extra environment, Hydra overrides);
    only `process` takes overrides."""
    head, *settings = engine.split("@")
    name, *overrides = head.split(":")
    if name not in ENGINES:
        raise SystemExit(f"--engines: unknown engine {name!r}; choose from {', '.join(ENGINES)}")
    if [o for o in overrides if "=" not in o] or (overrides and name != "process"):
        raise SystemExit(f"--engines: {engine!r}: only `process` takes overrides, as "
                         "process:KEY=VALUE[:KEY=VALUE]")
    env = {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--engines: {item!r} in {engine!r} is not VAR=VALUE")
        env[key] = value
    return name, env, overrides


def _run_child(engine: str, a, shape: dict) -> list[dict]:
    name, extra, overrides = _parse_engine(engine)
    cmd = [sys.executable, __file__, "--child", name, "--method", a.method,
           "--staleness", str(a.staleness), "--threads", str(a.threads), "--lr", str(a.lr),
           "--warmup", str(a.warmup), "--steps", str(a.steps), "--cache-dir", a.cache_dir,
           "--prompts", str(shape["prompts"]), "--group-size", str(a.group_size),
           "--max-new-tokens", str(shape["max_new_tokens"])]
    if a.experiment:
        cmd += ["--experiment", a.experiment]
    if shape["force_length"]:
        cmd.append("--force-length")
    cmd += [f"--process-override={o}" for o in overrides]
    env = {**os.environ, **extra}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    lines = [x for x in done.stdout.splitlines() if x.startswith("BENCH ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{engine} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("BENCH "):])


def _summary(rounds: list[list[dict]]) -> dict:
    """Medians over rounds of each round's per-step medians; tokens/s per round is its
    tokens over its time."""
    per_round = []
    for steps in rounds:
        row = {k: statistics.median(s[k] for s in steps)
               for k in ("step", "generation", "behaviour", "updates")}
        row["tokens/s"] = sum(s["tokens"] for s in steps) / sum(s["step"] for s in steps)
        row["tokens/step"] = statistics.mean(s["tokens"] for s in steps)
        if "wall" in steps[0]:  # the process engine: its life's wall clock, spread per step
            row["wall"] = statistics.median(s["wall"] for s in steps)
            row["wall tokens/s"] = sum(s["tokens"] for s in steps) / sum(s["wall"] for s in steps)
        per_round.append(row)
    return {k: statistics.median(r[k] for r in per_round) for k in per_round[0]} | {
        "per_round_wall_tokens/s": [r.get("wall tokens/s") for r in per_round],
        "per_round_tokens/s": [r["tokens/s"] for r in per_round]}


def _wall_rate(summary: dict) -> float:
    """Tokens per second of a whole process where the engine is one, else of its steps."""
    return summary.get("wall tokens/s", summary["tokens/s"])


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} CPUs"


def race(a, engines: list[str], shape: dict, label: str) -> dict[str, dict]:
    results: dict[str, list[list[dict]]] = {e: [] for e in engines}
    print(f"== {label}: {shape['prompts']} prompts x {a.group_size} samples, "
          f"{shape['max_new_tokens']} new tokens{' (forced)' if shape['force_length'] else ''}, "
          f"staleness {a.staleness}, method {a.method}, {a.threads} threads; "
          f"{a.warmup} warm-up + {a.steps} timed steps, {a.rounds} rounds", flush=True)
    for r in range(a.rounds):
        order = engines[r % len(engines):] + engines[:r % len(engines)]  # rotate who goes first
        for engine in order:
            t0 = time.perf_counter()
            results[engine].append(_run_child(engine, a, shape))
            s = _summary([results[engine][-1]])
            print(f"  round {r + 1} {engine}: step {s['step']:.2f} s, {s['tokens/s']:.0f} tokens/s "
                  f"({time.perf_counter() - t0:.0f} s with start-up; {_load()})", flush=True)
    summary = {e: _summary(results[e]) for e in engines}
    print("\n| engine | step s | generation s | behaviour s | updates s | tokens/step | tokens/s "
          "| wall s per step | wall tokens/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for e, s in summary.items():
        wall = (f"{s['wall']:.2f} | {s['wall tokens/s']:.0f}" if "wall" in s else "- | -")
        print(f"| {e} | {s['step']:.2f} | {s['generation']:.2f} | {s['behaviour']:.2f} | "
              f"{s['updates']:.2f} | {s['tokens/step']:.0f} | {s['tokens/s']:.0f} | {wall} |")
    return summary


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engines", default="project,trl,plug",
                   help="comma-separated: project, trl, plug, process[:KEY=VALUE...], each "
                        "optionally @VAR=VALUE...")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--experiment", help="race on this experiment's work (e.g. smol_4x, the "
                   "pretrained testbed) instead of the tiny default's")
    p.add_argument("--prompts", type=int, help="prompts per rollout (default: the work's)")
    p.add_argument("--group-size", type=int, help="responses per prompt (default: the work's)")
    p.add_argument("--max-new-tokens", type=int, help="(default: the work's)")
    p.add_argument("--staleness", type=int, help="updates per rollout (default: the work's)")
    p.add_argument("--lr", type=float, help="AdamW's rate (default: the work's)")
    p.add_argument("--method", default="ppo")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cache-dir", default=str(REPO / ".cache"))
    p.add_argument("--force-length", action="store_true",
                   help="every response max-new-tokens long (timing only)")
    p.add_argument("--scaling", action="store_true",
                   help="step time at 64/128/256 new tokens (128 responses) and 64/128/256 "
                        "responses (64 new tokens), forced lengths, project vs trl")
    p.add_argument("--json", help="also write the summaries here")
    p.add_argument("--child", choices=ENGINES, help=argparse.SUPPRESS)
    p.add_argument("--process-override", dest="process_overrides", action="append", default=[],
                   help=argparse.SUPPRESS)
    a = p.parse_args()
    fill_work(a)
    if a.child:
        child(a)
        return
    print(f"machine: {_load()}", flush=True)
    engines = a.engines.split(",")
    for engine in engines:
        _parse_engine(engine)
    out = {}
    if a.scaling:
        if a.engines == p.get_default("engines"):
            engines = ["project", "trl"]
        shapes = [(128 // a.group_size, t) for t in (64, 128, 256)]
        shapes += [(n // a.group_size, 64) for n in (64, 256)]
        for prompts, tokens in shapes:
            shape = {"prompts": prompts, "max_new_tokens": tokens, "force_length": True}
            label = f"{prompts * a.group_size} responses x {tokens} tokens"
            out[label] = race(a, engines, shape, label)
        print("\n| responses | new tokens | " + " | ".join(f"{e} step s" for e in engines)
              + " | " + " | ".join(f"{e} tokens/s" for e in engines) + " |")
        print("|---|---|" + "---|" * (2 * len(engines)))
        for (prompts, tokens), s in zip(shapes, out.values(), strict=True):
            print(f"| {prompts * a.group_size} | {tokens} | "
                  + " | ".join(f"{s[e]['step']:.2f}" for e in engines) + " | "
                  + " | ".join(f"{s[e]['tokens/s']:.0f}" for e in engines) + " |")
    else:
        shape = {"prompts": a.prompts, "max_new_tokens": a.max_new_tokens,
                 "force_length": a.force_length}
        out["race"] = summary = race(a, engines, shape, "race")
        base = engines[0]
        print(f"\nmachine at the end: {_load()}")
        for e in engines[1:]:
            ratio = summary[base]["tokens/s"] / summary[e]["tokens/s"]
            pairs = [x / y for x, y in zip(summary[base]["per_round_tokens/s"],
                                           summary[e]["per_round_tokens/s"], strict=True)]
            print(f"{base} / {e} tokens per second: {ratio:.2f}x "
                  f"(per round: {', '.join(f'{x:.2f}' for x in pairs)})")
            if "wall" in summary[base] or "wall" in summary[e]:
                print(f"{base} / {e} on the wall clock where an engine has one: "
                      f"{_wall_rate(summary[base]) / _wall_rate(summary[e]):.2f}x")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
