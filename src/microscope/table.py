"""`branches.parquet`: one row per (rollout, update, arm), rewritten whole and atomically after
every branched state, so a study stopped anywhere keeps every state it finished.

On a resume the trunk runs again from its last checkpoint, or from its start when the study's
dir was carried to a machine without its trunk (a checkpoint of the pretrained testbed is
1.6 GB; its table is kilobytes). The rows of the states it runs again are a record: at each
such state the trunk's probe reading and the mini-batch's token classes are compared with the
recorded ones, and only when they are equal bit for bit are the recorded rows kept and the
arms skipped (src/microscope/branch.py). Until then they stay in the file, so a resume that
stops again loses none of them.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from src.config_fields import ConfigError

State = tuple[int, int]  # (rollout, update)


def read_branches(path: Path) -> pd.DataFrame:
    """The table at `path`; ConfigError naming the file when it cannot be read."""
    try:
        return pd.read_parquet(path)
    except Exception as e:  # pyarrow's errors for a truncated or foreign file
        raise ConfigError(f"{path} cannot be read ({type(e).__name__}: {e}); it is the study's "
                          "table of branches: restore it from a copy, or remove the study dir "
                          "and run the study again") from None


class BranchTable:
    def __init__(self, path: Path, resume_at: int, record: bool = True):
        """`record=False` (the horizons' table): rows the trunk will run again are dropped and
        made again instead, since a horizon's rows carry no reading of its start state."""
        self.path = Path(path)
        self.rows: list[dict] = []
        self.recorded: dict[State, list[dict]] = {}  # states the trunk has yet to reach again
        if self.path.exists():
            kept = read_branches(self.path)
            self.rows = kept[kept["rollout"] < resume_at].to_dict("records")
            if record:
                again = kept[kept["rollout"] >= resume_at].groupby(["rollout", "update"])
                self.recorded = {(int(rollout), int(update)): rows.to_dict("records")
                                 for (rollout, update), rows in again}

    def recorded_at(self, rollout: int, update: int) -> list[dict] | None:
        """The recorded rows of this state, if the table has it from an earlier trunk."""
        return self.recorded.get((rollout, update))

    def confirm(self, rollout: int, update: int) -> None:
        """The trunk reached this recorded state again, equal: its rows are the trunk's."""
        self.rows += self.recorded.pop((rollout, update))

    def add(self, rows: list[dict]) -> None:
        self.rows += rows
        pending = [row for state_rows in self.recorded.values() for row in state_rows]
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        pd.DataFrame(self.rows + pending).to_parquet(tmp, index=False)
        tmp.replace(self.path)
