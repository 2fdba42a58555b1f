"""When the loop may propose candidate `seq`, and from which results: the rule that keeps a run reproducible.

A candidate is proposed from the results of exactly the candidates before `view_end(seq)`, whatever order
the jobs finish in, so the same seed gives the same run on any executor, and a resume re-proposes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

SCHEDULES = ("steady", "batch")


class Schedule(Protocol):
    workers: int
    """Jobs in flight at most."""

    def view_end(self, seq: int) -> int:
        """Candidate `seq` is proposed once every candidate with a smaller seq than this has finished,
        from their results alone."""
        ...


@dataclass(frozen=True)
class SteadyState:
    """W jobs in flight; a freed slot takes the next candidate at once, proposed from every result at
    least 2W places older: the slack lets short jobs overtake a long one without changing the run."""

    workers: int

    def view_end(self, seq: int) -> int:
        return seq - 2 * self.workers + 1


@dataclass(frozen=True)
class Batches:
    """W candidates proposed together, then all W waited for (the loop before the steady state; the
    benchmark's baseline): workers idle while the slowest job of a batch runs."""

    workers: int

    def view_end(self, seq: int) -> int:
        return seq - seq % self.workers


def schedule_for(name: str, workers: int) -> Schedule:
    """The schedule a run's config names."""
    if name == "steady":
        return SteadyState(workers)
    if name == "batch":
        return Batches(workers)
    raise ValueError(f"unknown schedule {name!r}; choose {' or '.join(SCHEDULES)}")
