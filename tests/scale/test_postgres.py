"""The store on PostgreSQL: migrated from an empty database, two searches writing at once lose nothing,
a killed search resumes exactly, and a wrong database is one line with nothing stored."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from in_worker import InWorker
from sqlalchemy.engine import make_url
from sqlmodel import SQLModel

from sandbox.job import Job, Result
from search.cli.main import main
from search.proposers.evolve.proposer import EvolveProposer
from search.service.runs import RunService, prepare
from search.store.migrate import VERSION_TABLE, head, revision
from search.store.store import Store, open_engine

pytestmark = pytest.mark.postgres


def config(seed: int, budget: int = 4):
    return prepare("kv", "gen:chat:1", {"capacity": 300}, budget=budget, trials=2, workers=2, seed=seed)


def searched(runs: RunService, run_id: str, sandbox: object = None) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs.execute(run_id, sandbox or InWorker(), EvolveProposer(), executor=pool)  # type: ignore[arg-type]


def leaderboard(runs: RunService, run_id: str) -> list[tuple]:
    """What a run found, by seq: the program (its canonical fingerprint, since the evolve proposer writes
    its parent's store-wide id into the docstring), its outcome, score and tuned PARAMS."""
    return [(c.seq, c.fingerprint, c.status, c.score, c.params) for c in runs.store.candidates(run_id)]


def test_the_migrations_replayed_from_an_empty_database_make_the_models_schema(postgres_url: str) -> None:
    engine = open_engine(postgres_url)
    with engine.connect() as connection:
        assert revision(connection) == head()
        ours = {"include_name": lambda name, kind, _: kind != "table" or name != VERSION_TABLE}
        assert compare_metadata(MigrationContext.configure(connection, opts=ours), SQLModel.metadata) == []


def test_two_searches_writing_to_one_server_at_once_lose_nothing(postgres_url: str, tmp_path: Path) -> None:
    alone = RunService(Store(open_engine(f"sqlite:///{tmp_path / 'alone.db'}")))
    expected = {}
    for seed in (1, 2):
        run_id = alone.record(config(seed)).run_id
        searched(alone, run_id)
        expected[seed] = leaderboard(alone, run_id)

    found: dict[int, list[tuple]] = {}
    failures: list[BaseException] = []
    start = threading.Barrier(2)

    def search(seed: int) -> None:
        try:
            start.wait()
            runs = RunService(Store(open_engine(postgres_url)))  # both migrate the new database at once
            run_id = runs.record(config(seed)).run_id
            searched(runs, run_id)
            found[seed] = leaderboard(runs, run_id)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=search, args=(seed,)) for seed in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not failures, failures
    assert found == expected, "each run as it is alone, nothing lost, nothing mixed"


class Interrupting:
    """Runs `allowed` candidate jobs, then ends the search as Ctrl-C would: a killed run."""

    name = "interrupting"

    def __init__(self, allowed: int) -> None:
        self.allowed, self.lock = allowed, threading.Lock()

    def run(self, job: Job) -> Result:
        with self.lock:
            self.allowed -= job.tuning is not None
            if self.allowed < 0:
                raise KeyboardInterrupt
        return InWorker().run(job)


def test_a_killed_search_resumes_exactly(postgres_url: str, tmp_path: Path) -> None:
    whole = RunService(Store(open_engine(f"sqlite:///{tmp_path / 'whole.db'}")))
    unbroken = whole.record(config(5, budget=6)).run_id
    searched(whole, unbroken)
    runs = RunService(Store(open_engine(postgres_url)))
    run_id = runs.record(config(5, budget=6)).run_id
    with pytest.raises(KeyboardInterrupt):
        searched(runs, run_id, Interrupting(allowed=2))
    assert "pending" in [c.status for c in runs.read.candidates(run_id)], "killed with jobs in flight"
    runs.resume(run_id)
    searched(runs, run_id)
    assert leaderboard(runs, run_id) == leaderboard(whole, unbroken)


def test_a_wrong_database_is_one_line_and_stores_nothing(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = make_url(postgres_url).set(database="no_such_database").render_as_string(hide_password=False)
    with pytest.raises(SystemExit) as ended:
        main(["search", "--workload", "gen:chat:1", "--budget", "1", "--db", wrong])
    assert ended.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"crucible: error: cannot open database {wrong}: ") and "no_such_database" in line
    assert RunService(Store(open_engine(postgres_url))).read.runs() == []
