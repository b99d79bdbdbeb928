"""`branches.parquet`: one row per (rollout, update, arm), rewritten whole and atomically after
every branched state, so a study stopped anywhere keeps every state it finished.

On a resume the trunk runs again from its last checkpoint: the rows of the rollouts it will
run again are dropped here and made again (the same numbers: the same state, the same arms).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from src.config_fields import ConfigError


def read_branches(path: Path) -> pd.DataFrame:
    """The table at `path`; ConfigError naming the file when it cannot be read."""
    try:
        return pd.read_parquet(path)
    except Exception as e:  # pyarrow's errors for a truncated or foreign file
        raise ConfigError(f"{path} cannot be read ({type(e).__name__}: {e}); it is the study's "
                          "table of branches: restore it from a copy, or remove the study dir "
                          "and run the study again") from None


class BranchTable:
    def __init__(self, path: Path, resume_at: int):
        self.path = Path(path)
        self.rows: list[dict] = []
        if self.path.exists():
            kept = read_branches(self.path)
            self.rows = kept[kept["rollout"] < resume_at].to_dict("records")

    def add(self, rows: list[dict]) -> None:
        self.rows += rows
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        pd.DataFrame(self.rows).to_parquet(tmp, index=False)
        tmp.replace(self.path)
