"""The UI's tests read a store seeded by real short searches on the shipped kv workload in the process
sandbox: one finished run of six candidates, and one stopped by its time budget (resumable)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("streamlit")

from streamlit.testing.v1 import AppTest

from search import cli
from search.readmodel import ReadModel, RunInfo
from search.store import Store, open_engine
from search.ui_command import DB_ENV, app_path

SEARCH = ["search", "--target", "kv", "--sandbox", "process", "--trials", "4", "--seed", "0"]


@dataclass(frozen=True)
class Seeded:
    url: str
    finished: RunInfo
    stopped: RunInfo

    @property
    def read(self) -> ReadModel:
        return ReadModel(Store(open_engine(self.url, create=False)))


@pytest.fixture(scope="session")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    url = f"sqlite:///{tmp_path_factory.mktemp('ui-store') / 'crucible.db'}"
    cli.main([*SEARCH, "--db", url, "--budget", "6"])
    cli.main([*SEARCH, "--db", url, "--budget", "50", "--time-budget", "0.001"])
    read = ReadModel(Store(open_engine(url, create=False)))
    finished, stopped = read.runs()
    assert (finished.status, stopped.status) == ("finished", "stopped")
    return Seeded(url, finished, stopped)


@pytest.fixture
def open_page(monkeypatch: pytest.MonkeyPatch) -> Callable[..., AppTest]:
    """Run the app on a store (`db`), switched to `page` with `query` in the URL; returns the AppTest."""

    def run(db: str, page: str = "views/runs.py", **query: str) -> AppTest:
        monkeypatch.setenv(DB_ENV, db)
        at = AppTest.from_file(str(app_path()), default_timeout=60)
        at.query_params.update(query)
        at.run()
        if page != "views/runs.py":
            at.switch_page(page)
            at.run()
        assert not at.exception, [e.value for e in at.exception]
        return at

    return run


@pytest.fixture
def missing_db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'nothing-here.db'}"
