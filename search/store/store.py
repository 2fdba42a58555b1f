"""The run store: SQLModel tables for runs, candidates, evaluations and events, in SQLite or PostgreSQL.

Every step of a search is written here before the next one starts, so a killed run resumes from the
store without repeating or losing a candidate.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, UniqueConstraint, event, func
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Field, Session, SQLModel, create_engine, select

from search.store.migrate import upgrade

DEFAULT_URL = "sqlite:///crucible.db"
BASELINE = "baseline"
"""The proposer name of a baseline's candidate row: baselines seed the islands and anchor the report."""
TUNE = "tune"
"""The proposer of a `crucible tune` run's trial rows, and the kind of the event that names its study."""


class StoreError(RuntimeError):
    """The store cannot be opened or written; the message is one line for the user."""


def _now() -> datetime:
    return datetime.now(UTC)


class Run(SQLModel, table=True):
    id: str = Field(primary_key=True)
    target: str
    status: str = "running"
    """running | finished | stopped (a budget or an interrupt ended it; resumable) | failed"""
    config: str
    """The run's full configuration as JSON: enough to reproduce or resume it."""
    created_at: datetime = Field(default_factory=_now)
    updated_at: datetime = Field(default_factory=_now)
    message: str = ""
    pid: int | None = None
    """The process that last started running it, so a reader can tell a killed run from a live one."""
    host: str = ""
    """The machine that process runs on (a pid means nothing elsewhere)."""


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
    status: str = "pending"
    """pending | evaluated | gated | duplicate (behaves as an earlier one; not tuned) | rejected | invalid |
    timeout | oom | denied | crashed"""
    message: str = ""
    params: str = "{}"
    trials: str = "[]"
    """The Optuna study that tuned its PARAMS, one {number, params, value, state} per trial, as JSON."""
    train_score: float | None = None
    score: float | None = None
    created_at: datetime = Field(default_factory=_now)
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
    created_at: datetime = Field(default_factory=_now)


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
    created_at: datetime = Field(default_factory=_now)


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
    at: datetime = Field(default_factory=_now)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def open_engine(url: str = DEFAULT_URL, create: bool = True) -> Engine:
    """Open the store at `url` (creating it unless `create` is False: a reader never makes an empty
    database out of a mistyped path), its schema migrated to the newest revision (search/store/migrate.py);
    SQLite files get WAL mode. Raises StoreError."""
    if "://" not in url:  # a bare path is the commonest slip; say what the URL would be
        raise StoreError(f"cannot open database {url}: not a store URL; a SQLite file is sqlite:///{url}")
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        path = Path(url.removeprefix("sqlite:///")).expanduser().resolve()
        if not create and not path.is_file():
            raise StoreError(f"no database at {path}")
        if not path.parent.is_dir():
            raise StoreError(f"cannot open database {url}: folder {path.parent} does not exist")
    try:
        engine = create_engine(url, connect_args={"timeout": 30} if url.startswith("sqlite") else {})
        if url.startswith("sqlite"):
            event.listen(engine, "connect", _sqlite_pragmas)
        upgrade(engine)
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot open database {url}: {_reason(exc)}") from None
    except ModuleNotFoundError as exc:
        raise StoreError(f"cannot open database {url}: driver {exc.name} is not installed") from None
    return engine


def _reason(exc: SQLAlchemyError) -> str:
    origin = getattr(exc, "orig", None)
    return str(origin or exc).splitlines()[0]


class Store:
    """Typed reads and writes of the tables; each write commits at once."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @contextmanager
    def _session(self) -> Iterator[Session]:
        try:
            with Session(self.engine, expire_on_commit=False) as session:
                yield session
        except SQLAlchemyError as exc:
            raise StoreError(f"database error: {_reason(exc)}") from None

    def create_run(self, target: str, config: dict[str, Any]) -> Run:
        run = Run(id=uuid.uuid4().hex[:10], target=target, config=json.dumps(config, sort_keys=True))
        return self._add(run)

    def _add(self, row: Any) -> Any:
        with self._session() as session:
            session.add(row)
            session.commit()
            session.refresh(row)
            return row

    def run(self, run_id: str) -> Run | None:
        with self._session() as session:
            found = session.get(Run, run_id)
            if found is None:
                matches = session.exec(select(Run).where(Run.id.startswith(run_id))).all()  # type: ignore[attr-defined]
                found = matches[0] if len(matches) == 1 else None
            return found

    def runs(self) -> Sequence[Run]:
        with self._session() as session:
            return session.exec(select(Run).order_by(Run.created_at)).all()  # type: ignore[arg-type]

    def set_run_status(self, run_id: str, status: str, message: str = "") -> None:
        with self._session() as session:
            run = session.get(Run, run_id)
            if run is None:
                raise StoreError(f"no run {run_id}")
            run.status, run.message, run.updated_at = status, message, _now()
            session.add(run)
            session.commit()

    def start_run(self, run_id: str, pid: int, host: str) -> None:
        """Mark a run running in process `pid` on `host`, so a reader can tell when that process is gone."""
        with self._session() as session:
            run = session.get(Run, run_id)
            if run is None:
                raise StoreError(f"no run {run_id}")
            run.status, run.message, run.pid, run.host, run.updated_at = "running", "", pid, host, _now()
            session.add(run)
            session.commit()

    def add_candidate(self, candidate: Candidate, verifications: Sequence[Verification] = ()) -> Candidate:
        """Record a candidate and the verdicts on its properties in one transaction."""
        with self._session() as session:
            session.add(candidate)
            session.flush()
            for verification in verifications:
                verification.candidate_id = candidate.id
                session.add(verification)
            session.commit()
            session.refresh(candidate)
            return candidate

    def finish_candidate(self, candidate: Candidate, evaluations: Sequence[Evaluation]) -> None:
        """Record a candidate's outcome and its evaluations in one transaction."""
        with self._session() as session:
            candidate.finished_at = _now()
            session.add(candidate)
            for evaluation in evaluations:
                session.add(evaluation)
            session.commit()

    def candidates(self, run_id: str) -> Sequence[Candidate]:
        with self._session() as session:
            query = select(Candidate).where(Candidate.run_id == run_id).order_by(Candidate.seq)  # type: ignore[arg-type]
            return session.exec(query).all()

    def candidate(self, candidate_id: int) -> Candidate | None:
        with self._session() as session:
            return session.get(Candidate, candidate_id)

    def evaluations(self, run_id: str, candidate_id: int | None = None) -> Sequence[Evaluation]:
        with self._session() as session:
            query = select(Evaluation).where(Evaluation.run_id == run_id)
            if candidate_id is not None:
                query = query.where(Evaluation.candidate_id == candidate_id)
            return session.exec(query.order_by(Evaluation.id)).all()  # type: ignore[arg-type]

    def add_evaluations(self, evaluations: Sequence[Evaluation]) -> None:
        with self._session() as session:
            for evaluation in evaluations:
                session.add(evaluation)
            session.commit()

    def verifications(self, run_id: str, candidate_id: int | None = None) -> Sequence[Verification]:
        with self._session() as session:
            query = select(Verification).where(Verification.run_id == run_id)
            if candidate_id is not None:
                query = query.where(Verification.candidate_id == candidate_id)
            return session.exec(query.order_by(Verification.id)).all()  # type: ignore[arg-type]

    def log(
        self,
        run_id: str,
        kind: str,
        message: str,
        *,
        proposer: str = "",
        model: str = "",
        tokens: int = 0,
        cost_usd: float = 0.0,
    ) -> None:
        event = Event(
            run_id=run_id,
            kind=kind,
            message=message,
            proposer=proposer,
            model=model,
            tokens=tokens,
            cost_usd=cost_usd,
        )
        self._add(event)

    def spend(self, run_id: str) -> tuple[int, float]:
        """Tokens and USD the run's proposals consumed: its candidates plus its failed proposals."""
        with self._session() as session:
            total_tokens, total_cost = 0, 0.0
            for table in (Candidate, Event):
                query = select(
                    func.coalesce(func.sum(table.tokens), 0), func.coalesce(func.sum(table.cost_usd), 0.0)
                ).where(table.run_id == run_id)
                tokens, cost = session.exec(query).one()
                total_tokens, total_cost = total_tokens + int(tokens), total_cost + float(cost)
            return total_tokens, total_cost

    def set_run_config(self, run_id: str, config: dict[str, Any]) -> None:
        """Replace a run's stored configuration (a resume that raises a cap or moves the endpoint)."""
        with self._session() as session:
            run = session.get(Run, run_id)
            if run is None:
                raise StoreError(f"no run {run_id}")
            run.config, run.updated_at = json.dumps(config, sort_keys=True), _now()
            session.add(run)
            session.commit()

    def events(self, run_id: str) -> Sequence[Event]:
        with self._session() as session:
            return session.exec(select(Event).where(Event.run_id == run_id).order_by(Event.id)).all()  # type: ignore[arg-type]

    def count_candidates(self, run_id: str) -> int:
        with self._session() as session:
            query = (
                select(func.count())
                .select_from(Candidate)
                .where(Candidate.run_id == run_id, Candidate.proposer != BASELINE)
            )
            return int(session.exec(query).one())
