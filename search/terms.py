"""The terms runs are recorded in, shared by the loop that writes them and the store and front ends that read
them: a baseline's proposer name, the kinds of run, the roles of a held-out tail's evaluations, what
candidates are selected on, and where a workload was cut. A low module: it imports nothing of Crucible."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

BASELINE = "baseline"
"""The proposer name of a baseline's candidate row: baselines seed the islands and anchor the report."""
KINDS = ("search", "tune", "ci", "validate")
"""Which verb of the run service made a run."""
TAIL = "tail"
"""Evaluation role: the held-out tail scored with the constants tuned on the head."""
TAIL_RETUNED = "tail-retuned"
"""Evaluation role: the tail scored after tuning the constants again on the whole tail."""
WHOLE = "window"
"""Select candidates on the run's whole window (train and eval instances alike)."""
UNSEEN = "unseen"
"""Select candidates on what tuning never saw: the window after its train share, warm where it can be."""
SELECT_CHOICES = (WHOLE, UNSEEN)
"""What candidates are ranked on (search/loop/selection.py)."""


@dataclass(frozen=True)
class Split:
    """Where a workload was cut (`--holdout`): `share` of its requests, the last in time, are the tail."""

    share: float
    head: str
    """The run's window, START:STOP."""
    tail: str
    """The held-out window, START:STOP."""
    warm: bool = False
    """The tail is replayed after the requests before it (uncounted), not from an empty state."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Split:
        """A stored split; one stored before `warm` existed was scored cold, and a resumed run keeps that."""
        return cls(float(data["share"]), str(data["head"]), str(data["tail"]), bool(data.get("warm", False)))
