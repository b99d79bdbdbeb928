"""The update microscope: every rule applied to the same state and the same mini-batch.

`python -m src.microscope experiment=<E> method=<trunk method> seed=<s> microscope.arms=[...]`
runs a trunk, an ordinary run of the experiment (its run dir is what `python -m src.run`
writes), and at the chosen states, before the trunk's own update, branches one update per
arm, measures it on fixed probes and on the mini-batch, restores the state exactly and lets
the trunk go on. docs/microscope.md says how to use it and what each column means.

- config.py: the `microscope.*` settings (kept out of the trunk's config);
- arms.py: the arms (a method, fixed bounds, no clip, a token class, without norm clipping);
- probes.py: the probes, drawn once per study, and a policy's readings on them;
- state.py: the snapshot and its exact restore;
- branch.py: the branches at one state; table.py: `branches.parquet`;
- study.py: the study dir (its settings file, the checks before any work).
"""
