"""Scale-out plugs: the project's objectives inside TRL and verl (see docs/integrations.md).

- `src.integrations.trl_grpo`: `ProjectGRPOTrainer`, a TRL `GRPOTrainer` whose loss is
  the project's methods; its launcher is `python -m src.integrations.trl_launch`, and
  `src.integrations.trl_run_dir` keeps its run dir (records, token rows, evals).
- `src.integrations.verl_losses`: the methods as entries of verl's policy-loss registry
  (load it in verl's workers with `actor_rollout_ref.model.external_lib`).
- `src.integrations.tasks`: the project's tasks as verl parquet data + reward function.

Nothing is imported here, so `import src.integrations` needs neither TRL nor verl. Importing
a plug changes nothing in your process (no environment variable, no thread setting); for the
project's CPU numbers call `src.pinning.pin_process()` before torch loads (docs/integrations.md).
"""
