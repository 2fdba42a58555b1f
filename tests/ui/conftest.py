"""Fixtures of the UI's tests: the seeded store (seeded_store.py) once per session, the app on a store."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("streamlit")

from seeded_store import Seeded, seed
from streamlit.testing.v1 import AppTest

from search.cli.ui import app_path
from search.settings import STORE_ENV


@pytest.fixture(scope="session")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    return seed(f"sqlite:///{tmp_path_factory.mktemp('ui-store') / 'crucible.db'}")


@pytest.fixture
def open_page(monkeypatch: pytest.MonkeyPatch) -> Callable[..., AppTest]:
    """Run the app on a store (`db`), switched to `page` with `query` in the URL; returns the AppTest."""

    def run(db: str, page: str = "views/runs.py", **query: str) -> AppTest:
        monkeypatch.setenv(STORE_ENV, db)
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
