"""`python -m src.microscope experiment=<E> method=<trunk method> seed=<s> microscope.arms=[...]`

Everything but `microscope.*` is the trunk's, as `python -m src.run` takes it. Bad settings
exit 2 with one line naming the key, before any work; an interrupted study resumes with the
same command. docs/microscope.md has the settings and the table's columns.
"""

from __future__ import annotations

import sys

from src.pinning import pin_process

if __name__ == "__main__":
    pin_process()  # before torch loads, as src.run does

from src.config_fields import ConfigError, config_exit  # noqa: E402


def main(args: list[str] | None = None) -> str:
    from src.microscope.branch import Microscope
    from src.microscope.study import prepare, study_label, write_settings
    from src.run import execute

    args = sys.argv[1:] if args is None else args
    try:
        study = prepare(args)
    except ConfigError as e:
        config_exit(str(e))
    write_settings(study)
    cfg = study.cfg
    label = study_label(cfg)
    scope = Microscope(study.settings, study.arms, study.dir, label, study.horizon_arms)
    status = execute(cfg, study.trunk_dir, overrides=study.trunk_args, observe=scope.attach)
    rows = 0 if scope.table is None else len(scope.table.rows)
    print(f"microscope: trunk {status}; {rows} branch rows in {study.dir / 'branches.parquet'}")
    return status


if __name__ == "__main__":
    main()
