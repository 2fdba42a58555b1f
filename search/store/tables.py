"""The store's tables: runs, candidates, evaluations, verdicts and events (SQLModel; SQLite or PostgreSQL).

Their columns change only with a migration of their own (search/store/migrations/versions/).
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import UniqueConstraint
from sqlmodel import Field, SQLModel


def now() -> datetime:
    return datetime.now(UTC)


class Run(SQLModel, table=True):
    id: str = Field(primary_key=True)
    target: str
    status: str = "running"
    """running | finished | stopped (a budget or an interrupt ended it; resumable) | failed"""
    config: str
    """The run's full configuration as JSON: enough to reproduce or resume it."""
    created_at: datetime = Field(default_factory=now)
    updated_at: datetime = Field(default_factory=now)
    message: str = ""
    pid: int | None = None
    """The process that last started running it, so a reader can tell a killed run from a live one."""
    host: str = ""
    """The machine that process runs on (a pid means nothing elsewhere)."""
    kind: str = "search"
    """search | tune | ci | validate: which verb of the run service made it."""
    subject: str = ""
    """What it is of within its kind: a tune study's name, a CI champion's; empty for a search."""


class Candidate(SQLModel, table=True):
    __table_args__ = (
        UniqueConstraint("run_id", "seq"),
        UniqueConstraint("run_id", "fingerprint"),
    )
    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="run.id", index=True)
    seq: int
    """Order of the candidate in its run; baselines come first."""
    name: str = ""
    source: str
    fingerprint: str
    behaviour: str = ""
    """How it ranks the target's behaviour sample, hashed (sandbox/worker.py); empty where not measured."""
    parent_id: int | None = None
    inspirations: str = "[]"
    """The ids of the candidates the proposer was shown beside the parent, as a JSON list."""
    island: int = 0
    proposer: str
    model: str = ""
    note: str = ""
    tokens: int = 0
    cost_usd: float = 0.0
    proposal: str = "{}"
    """How it was proposed, as JSON: seconds, and for a proposer that asks a model its prompt and completion
    tokens and what became of each reply (search.proposers.base.Exchange); {} where not recorded."""
    status: str = "pending"
    """pending | evaluated | gated | duplicate (behaves as an earlier one; not tuned) | rejected | invalid |
    timeout | oom | denied | crashed"""
    message: str = ""
    params: str = "{}"
    trials: str = "[]"
    """The Optuna study that tuned its PARAMS, one {number, params, value, state} per trial, as JSON."""
    train_score: float | None = None
    score: float | None = None
    created_at: datetime = Field(default_factory=now)
    finished_at: datetime | None = None


class Evaluation(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="run.id", index=True)
    candidate_id: int | None = Field(default=None, foreign_key="candidate.id", index=True)
    policy: str = ""
    """The baseline's name for a built-in baseline (no candidate row)."""
    instance: str
    role: str
    params: str = "{}"
    metrics: str = "{}"
    seconds: float = 0.0
    backend: str = ""
    created_at: datetime = Field(default_factory=now)


class Verification(SQLModel, table=True):
    """One property's verdict on one candidate, with the time it took and the counterexample."""

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="run.id", index=True)
    candidate_id: int | None = Field(default=None, foreign_key="candidate.id", index=True)
    property: str
    severity: str
    """hard (a counterexample rejects the candidate) | soft (reported only)"""
    verdict: str
    """proved | counterexample | unknown"""
    seconds: float
    counterexample: str = ""
    """The inputs (and outputs) that show the violation, as JSON; empty unless refuted."""
    message: str = ""
    created_at: datetime = Field(default_factory=now)


class Event(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="run.id", index=True)
    kind: str
    message: str
    proposer: str = ""
    model: str = ""
    tokens: int = 0
    cost_usd: float = 0.0
    """What a failed proposal consumed (an LLM reply that did not parse still costs), so totals add up."""
    proposal: str = "{}"
    """A failed or repeated proposal's figures, as a candidate's `proposal`."""
    at: datetime = Field(default_factory=now)
