"""A run's journal: the reads and writes of one run that the search loop and the held-out tail go through
(search/loop/journal.py's protocol). The service hands it out; the store is never handed to a filler, so
the service stays the only writer of runs.

`evaluations` is the one place results become Evaluation rows, whichever kind of run they belong to.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sandbox.job import Result
from search.loop.journal import FINISHED_FIELDS, CandidateRecord, EvaluationRecord
from search.store.store import Store
from search.store.tables import Candidate, Evaluation, Run, Verification
from verifiers.properties import Outcome


@dataclass(frozen=True)
class Scored:
    """One instance's result as a job reports it: its label, role, metrics and time."""

    label: str
    role: str
    metrics: Mapping[str, float]
    seconds: float = 0.0

    @classmethod
    def of(cls, result: Any) -> Scored:
        """From a sandbox InstanceResult, or from its JSON form (a dict, as an Optuna study keeps it)."""
        if isinstance(result, Mapping):
            return cls(result["label"], result["role"], result["metrics"], float(result.get("seconds", 0.0)))
        return cls(result.label, result.role, result.metrics, float(result.seconds))


def evaluations(
    run_id: str,
    candidate_id: int | None,
    results: Iterable[Any],
    params: Mapping[str, Any],
    backend: str = "",
    *,
    policy: str = "",
    role: str | None = None,
) -> list[Evaluation]:
    """Results as Evaluation rows: each instance under its own role, or only the eval instances under
    `role` (a held-out tail's), for a candidate row or a built-in `policy`."""
    rows = []
    for result in results:
        scored = Scored.of(result)
        if role is not None and scored.role != "eval":
            continue
        rows.append(
            Evaluation(
                run_id=run_id,
                candidate_id=candidate_id,
                policy=policy,
                instance=scored.label,
                role=role or scored.role,
                params=json.dumps(dict(params), sort_keys=True),
                metrics=json.dumps(dict(scored.metrics), sort_keys=True),
                seconds=scored.seconds,
                backend=backend,
            )
        )
    return rows


class RunJournal:
    """Everything the code that fills one run may read of it and write to it, in the loop's records."""

    def __init__(self, store: Store, run_id: str) -> None:
        self._store = store
        self.run_id = run_id

    # reads of this run
    def _run(self) -> Run:
        found = self._store.run(self.run_id)
        assert found is not None
        return found

    def config(self) -> dict[str, Any]:
        return dict(json.loads(self._run().config))

    def target(self) -> str:
        return self._run().target

    def candidates(self) -> Sequence[CandidateRecord]:
        return [_record(row) for row in self._store.candidates(self.run_id)]

    def evaluations(self, candidate_id: int | None = None) -> Sequence[EvaluationRecord]:
        return [
            EvaluationRecord(e.candidate_id, e.policy, e.instance, e.role, json.loads(e.metrics))
            for e in self._store.evaluations(self.run_id, candidate_id)
        ]

    def spend(self) -> tuple[int, float]:
        return self._store.spend(self.run_id)

    # writes to this run
    def started(self) -> None:
        """The run is running in this process, so a reader can tell when the process is gone."""
        self._store.start_run(self.run_id, os.getpid(), socket.gethostname())

    def ended(self, status: str, message: str = "") -> None:
        self._store.set_run_status(self.run_id, status, message)

    def log(self, kind: str, message: str, **spent: Any) -> None:
        self._store.log(self.run_id, kind, message, **spent)

    def add(self, record: CandidateRecord, outcomes: Sequence[Outcome] = ()) -> CandidateRecord:
        """Record a candidate (and Z3's verdicts on it) before anything runs."""
        fields = {f.name: getattr(record, f.name) for f in dataclasses.fields(record) if f.name != "id"}
        row = self._store.add_candidate(
            Candidate(**fields), [_verification(self.run_id, o) for o in outcomes]
        )
        record.id = row.id
        return record

    def finish(self, record: CandidateRecord, result: Result) -> None:
        """Record a candidate's outcome (set on the record) and the result's evaluations at once."""
        assert record.id is not None, "a candidate is added before it finishes"
        rows = evaluations(self.run_id, record.id, result.instances, result.params, result.backend)
        self._store.finish_candidate(record.id, {f: getattr(record, f) for f in FINISHED_FIELDS}, rows)

    def scored(
        self, candidate_id: int | None, result: Result, *, policy: str = "", role: str | None = None
    ) -> None:
        """Record a result's evaluations for a candidate row or a built-in `policy`; with `role`, only its
        eval instances, under that role (a held-out tail's)."""
        params = result.params
        rows = evaluations(
            self.run_id, candidate_id, result.instances, params, result.backend, policy=policy, role=role
        )
        self._store.add_evaluations(rows)


def _record(row: Candidate) -> CandidateRecord:
    """A stored candidate as the loop's record."""
    return CandidateRecord(**{f.name: getattr(row, f.name) for f in dataclasses.fields(CandidateRecord)})


def _verification(run_id: str, outcome: Outcome) -> Verification:
    cex = json.dumps(outcome.counterexample, sort_keys=True) if outcome.counterexample else ""
    return Verification(
        run_id=run_id,
        property=outcome.property,
        severity=outcome.severity,
        verdict=outcome.verdict,
        seconds=outcome.seconds,
        counterexample=cex,
        message=outcome.message,
    )
