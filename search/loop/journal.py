"""What the search loop may read of its run and write to it: its own plain records and a protocol the run
service implements (the service is the only writer of runs, and maps these records to the store's rows;
the loop never holds the store)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sandbox.job import Result
from verifiers.properties import Outcome


@dataclass
class CandidateRecord:
    """One program of a run as the loop knows it: proposed (status "pending"), then finished with its
    outcome. `id` is the store's, set once the journal has added it."""

    run_id: str
    seq: int
    """Order of the candidate in its run; baselines come first, with seqs below 0."""
    source: str
    fingerprint: str
    proposer: str
    name: str = ""
    island: int = 0
    parent_id: int | None = None
    inspirations: str = "[]"
    """The ids of the candidates the proposer was shown beside the parent, as a JSON list."""
    model: str = ""
    note: str = ""
    tokens: int = 0
    cost_usd: float = 0.0
    proposal: str = "{}"
    """How it was proposed, as JSON (search.proposers.base.Exchange and the seconds it took)."""
    status: str = "pending"
    """pending | evaluated | gated | duplicate | rejected | invalid | timeout | oom | denied | crashed"""
    message: str = ""
    behaviour: str = ""
    params: str = "{}"
    trials: str = "[]"
    train_score: float | None = None
    score: float | None = None
    id: int | None = None


FINISHED_FIELDS = ("status", "message", "behaviour", "params", "trials", "train_score", "score")
"""What the loop sets on a candidate when its job is done."""


@dataclass(frozen=True)
class EvaluationRecord:
    """One instance's metrics for a candidate (or a built-in baseline, `policy`) of the run."""

    candidate_id: int | None
    policy: str
    instance: str
    role: str
    metrics: Mapping[str, float]


class Journal(Protocol):
    run_id: str

    def config(self) -> dict[str, Any]:
        """The run's stored configuration (RunConfig's JSON)."""
        ...

    def target(self) -> str: ...

    def candidates(self) -> Sequence[CandidateRecord]: ...

    def evaluations(self, candidate_id: int | None = None) -> Sequence[EvaluationRecord]: ...

    def spend(self) -> tuple[int, float]:
        """Tokens and USD the run's proposals consumed, failed ones included."""
        ...

    def started(self) -> None:
        """The run is running in this process."""
        ...

    def ended(self, status: str, message: str = "") -> None: ...

    def log(self, kind: str, message: str, **spent: object) -> None: ...

    def add(self, record: CandidateRecord, outcomes: Sequence[Outcome] = ()) -> CandidateRecord:
        """Record a candidate, with Z3's verdicts on it, before anything runs; the record with its id."""
        ...

    def finish(self, record: CandidateRecord, result: Result) -> None:
        """Record a candidate's outcome (FINISHED_FIELDS, set on the record) and the result's evaluations in
        one transaction."""
        ...

    def scored(
        self, candidate_id: int | None, result: Result, *, policy: str = "", role: str | None = None
    ) -> None:
        """Record a result's evaluations for a candidate or a built-in `policy`; with `role`, only its eval
        instances, under that role (a held-out tail's)."""
        ...
