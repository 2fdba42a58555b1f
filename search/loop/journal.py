"""What the search loop may read of its run and write to it: a protocol the run service implements (the
service is the only writer of runs; the loop never holds the store)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from sandbox.job import Result
from search.store.tables import Candidate, Evaluation, Event, Run
from verifiers.properties import Outcome


class Journal(Protocol):
    run_id: str

    def run(self) -> Run: ...

    def candidates(self) -> Sequence[Candidate]: ...

    def evaluations(self, candidate_id: int | None = None) -> Sequence[Evaluation]: ...

    def events(self) -> Sequence[Event]: ...

    def spend(self) -> tuple[int, float]:
        """Tokens and USD the run's proposals consumed, failed ones included."""
        ...

    def started(self) -> None:
        """The run is running in this process."""
        ...

    def ended(self, status: str, message: str = "") -> None: ...

    def log(self, kind: str, message: str, **spent: object) -> None: ...

    def add(self, row: Candidate, outcomes: Sequence[Outcome] = ()) -> Candidate:
        """Record a candidate, with Z3's verdicts on it, before anything runs."""
        ...

    def finish(self, row: Candidate, result: Result) -> None:
        """Record a candidate's outcome (set on the row) and the result's evaluations in one transaction."""
        ...

    def scored(
        self, candidate_id: int | None, result: Result, *, policy: str = "", role: str | None = None
    ) -> None:
        """Record a result's evaluations for a candidate row or a built-in `policy`; with `role`, only its
        eval instances, under that role (a held-out tail's)."""
        ...
