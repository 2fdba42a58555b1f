"""Runs the service fills from work done elsewhere: a tune study (its trials and front), a CI job's scores of
a champion, a validation's policies in the simulator and the engine. Each is one verb of the service; the
work hands over plain data, and the rows are written here, never by the work itself.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from search.service.journal import Scored, evaluations
from search.stats.means import mean_metrics
from search.store.store import TUNE, Store, StoreError
from search.store.tables import Candidate
from search.terms import BASELINE
from verifiers.fingerprint import fingerprint

CONFIGURED_SEQ = -1
"""The row of a tune study's run that holds the policy as configured."""


@dataclass(frozen=True)
class Trial:
    """One trial of a study as its run keeps it: the policy at the trial's values, its train results and,
    for a trial on the front, its eval results."""

    number: int
    source: str
    mark: str
    """A fingerprint that tells trials apart (two processes' samplers may draw the same point)."""
    params: dict[str, Any]
    complete: bool
    message: str = ""
    note: str = ""
    train: list[dict[str, Any]] = field(default_factory=list)
    train_score: float | None = None
    scored: dict[str, Any] | None = None
    """{"instances": [...], "backend": ...} on the eval instances, once it is on the front."""


@dataclass(frozen=True)
class Study:
    """A tune study as its run keeps it; `config` is stored as the run's configuration."""

    name: str
    storage: str
    target: str
    policy: str
    source: str
    config: dict[str, Any]
    objectives: list[dict[str, str]]
    knobs: list[str]
    requested: int
    configured: dict[str, Any]
    """{"instances": [...], "backend": ...}: the policy as configured, on the eval instances."""
    configured_values: dict[str, float]
    trials: list[Trial]


@dataclass(frozen=True)
class Policy:
    """One policy a CI job or a validation scored: its row's name, source and results."""

    name: str
    source: str
    results: list[dict[str, Any]]
    params: Mapping[str, float] = field(default_factory=dict)
    note: str = ""
    backend: str = ""


def mean(results: Sequence[Mapping[str, Any]], metric: str) -> float | None:
    """A metric averaged over the results' instances (None where one lacks it)."""
    return mean_metrics([Scored.of(r).metrics for r in results]).get(metric)


def record_study(store: Store, study: Study) -> str:
    """The study as a run of kind tune (made on first use, found again by its name and storage): the
    configured policy as its baseline, one row per trial, the front scored on eval. Several processes may
    record one study: rows already there are kept."""
    run_id = _study_run(store, study)
    rows = {row.seq: row for row in store.candidates(run_id)}
    primary = study.objectives[0]["metric"]
    if CONFIGURED_SEQ not in rows:
        row = _add(store, Candidate(
            run_id=run_id, seq=CONFIGURED_SEQ, name=f"{study.policy} (as configured)", source=study.source,
            fingerprint=fingerprint(study.source), proposer=BASELINE, status="evaluated",
        ))  # fmt: skip
        if row is not None:
            results = study.configured["instances"]
            backend = study.configured["backend"]
            store.finish_candidate(
                row.id,
                {"score": mean(results, primary)},
                evaluations(run_id, row.id, results, study.configured_values, backend),
            )
    for trial in study.trials:
        row = rows.get(trial.number)
        if row is None:
            row = _add(store, Candidate(
                run_id=run_id, seq=trial.number, name=f"trial {trial.number}", source=trial.source,
                fingerprint=trial.mark, proposer=TUNE, note=trial.note,
                params=json.dumps(trial.params, sort_keys=True),
            ))  # fmt: skip
            if row is None:
                continue
            outcome = {
                "status": "gated" if trial.complete else "invalid",
                "message": trial.message,
                "train_score": trial.train_score,
            }
            store.finish_candidate(row.id, outcome, evaluations(run_id, row.id, trial.train, trial.params))
        if trial.scored is not None and row.score is None:
            row.score = mean(trial.scored["instances"], primary)
            scored = evaluations(
                run_id, row.id, trial.scored["instances"], trial.params, trial.scored["backend"]
            )
            store.finish_candidate(row.id, {"status": "evaluated", "score": row.score}, scored)
    done = len(study.trials)
    # never "stopped": the service cannot resume a study; rerunning `crucible tune` continues it
    message = (
        ""
        if done >= study.requested
        else f"{done} of {study.requested} trials; rerun crucible tune to continue"
    )
    store.set_run_status(run_id, "finished", message)
    return run_id


def _study_run(store: Store, study: Study) -> str:
    """The study's run (kind tune, the study's name its subject, in the same storage); made on first use,
    its id a hash of the two."""
    for run in store.runs(kind="tune", subject=study.name):
        if json.loads(run.config).get("tune", {}).get("storage") == study.storage:
            return run.id
    tune = {
        "study": study.name,
        "storage": study.storage,
        "policy": study.policy,
        "objectives": study.objectives,
        "knobs": study.knobs,
    }
    made = hashlib.sha256(f"tune\0{study.name}\0{study.storage}".encode()).hexdigest()[:10]
    try:  # the same id in every process, so two that record the study at once make one run
        return store.create_run(
            study.target, {**study.config, "tune": tune}, kind="tune", subject=study.name, run_id=made
        ).id
    except StoreError:
        if store.run(made) is None:
            raise
        return made


def _add(store: Store, row: Candidate) -> Candidate | None:
    """Add a row; None when another process of the same study added its seq first (any other failure is
    the store's, and raised: a trial must not go unrecorded silently)."""
    try:
        return store.add_candidate(row)
    except StoreError:
        if any(c.seq == row.seq for c in store.candidates(row.run_id)):
            return None
        raise


def record_scores(
    store: Store,
    kind: str,
    subject: str,
    target: str,
    config: Mapping[str, Any],
    policies: Sequence[Policy],
    metric: str,
    marker: Mapping[str, Any] | None = None,
) -> str:
    """A finished run of `kind` (ci, validate) holding each policy's scores as an evaluated row, the first
    at seq -1000 and on: what the next job reads back as the previous scores of `subject`."""
    run = store.create_run(target, dict(config), kind=kind, subject=subject)
    if marker:
        store.log(run.id, kind, json.dumps(dict(marker), sort_keys=True))
    for i, policy in enumerate(policies):
        row = store.add_candidate(
            Candidate(
                run_id=run.id,
                seq=FIRST_SCORED_SEQ + i,
                name=policy.name,
                source=policy.source,
                fingerprint=fingerprint(policy.source) if policy.source else f"builtin:{policy.name}",
                proposer=BASELINE,
                status="evaluated",
                note=policy.note,
            )
        )
        store.finish_candidate(
            row.id,
            {"score": mean(policy.results, metric)},
            evaluations(run.id, row.id, policy.results, policy.params, policy.backend),
        )
    store.set_run_status(run.id, "finished")
    return run.id


FIRST_SCORED_SEQ = -1000
"""The first row of a run of scores (ci, validate): its policies are baselines of the run, not candidates."""
