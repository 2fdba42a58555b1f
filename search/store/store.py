"""The run store: typed reads and writes of the tables (search/store/tables.py) in SQLite or PostgreSQL.

Every step of a search is written here before the next one starts, so a killed run resumes from the
store without repeating or losing a candidate. Only the run service writes through it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event, func
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session, create_engine, select

from search.errors import UserError
from search.settings import DEFAULT_STORE as DEFAULT_URL
from search.settings import redacted
from search.store.migrate import NotOurs, check_ours, upgrade
from search.store.tables import Candidate, Evaluation, Event, Run, Verification, now
from search.terms import BASELINE

TUNE = "tune"
"""The proposer of a `crucible tune` run's trial rows."""


class StoreError(UserError):
    """The store cannot be opened or written; the message is one line for the user."""


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
            raise StoreError(f"cannot open database {redacted(url)}: folder {path.parent} does not exist")
    try:
        connect_args = {"timeout": 30} if url.startswith("sqlite") else {}
        looking = create_engine(url, connect_args=connect_args)  # no pragma yet: WAL mode writes the file
        try:
            with looking.connect() as connection:
                check_ours(connection)
        finally:
            looking.dispose()
        engine = create_engine(url, connect_args=connect_args)
        if url.startswith("sqlite"):
            event.listen(engine, "connect", _sqlite_pragmas)
        upgrade(engine)
    except NotOurs as exc:
        raise StoreError(f"cannot open database {redacted(url)}: {exc}") from None
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot open database {redacted(url)}: {_reason(exc)}") from None
    except ModuleNotFoundError as exc:
        message = f"cannot open database {redacted(url)}: driver {exc.name} is not installed"
        raise StoreError(message) from None
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

    def create_run(
        self, target: str, config: dict[str, Any], kind: str = "search", subject: str = "", run_id: str = ""
    ) -> Run:
        """A new run, with a fresh id unless one is given (StoreError if a run has it already)."""
        text = json.dumps(config, sort_keys=True)
        run = Run(id=run_id or uuid.uuid4().hex[:10], target=target, config=text, kind=kind, subject=subject)
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

    def runs(self, kind: str | None = None, subject: str | None = None) -> Sequence[Run]:
        """Every run, oldest first; only those of a kind (and subject) when given."""
        with self._session() as session:
            query = select(Run)
            if kind is not None:
                query = query.where(Run.kind == kind)
            if subject is not None:
                query = query.where(Run.subject == subject)
            return session.exec(query.order_by(Run.created_at)).all()  # type: ignore[arg-type]

    def set_run_status(self, run_id: str, status: str, message: str = "") -> None:
        with self._session() as session:
            run = session.get(Run, run_id)
            if run is None:
                raise StoreError(f"no run {run_id}")
            run.status, run.message, run.updated_at = status, message, now()
            session.add(run)
            session.commit()

    def start_run(self, run_id: str, pid: int, host: str) -> None:
        """Mark a run running in process `pid` on `host`, so a reader can tell when that process is gone."""
        with self._session() as session:
            run = session.get(Run, run_id)
            if run is None:
                raise StoreError(f"no run {run_id}")
            run.status, run.message, run.pid, run.host, run.updated_at = "running", "", pid, host, now()
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

    def finish_candidate(
        self, candidate_id: int, outcome: Mapping[str, Any], evaluations: Sequence[Evaluation]
    ) -> None:
        """Record a candidate's outcome (its columns by name) and its evaluations in one transaction."""
        with self._session() as session:
            candidate = session.get(Candidate, candidate_id)
            if candidate is None:
                raise StoreError(f"no candidate {candidate_id}")
            for name, value in outcome.items():
                setattr(candidate, name, value)
            candidate.finished_at = now()
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
        proposal: str = "{}",
    ) -> None:
        event = Event(
            run_id=run_id,
            kind=kind,
            message=message,
            proposer=proposer,
            model=model,
            tokens=tokens,
            cost_usd=cost_usd,
            proposal=proposal,
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
            run.config, run.updated_at = json.dumps(config, sort_keys=True), now()
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
