"""Fixtures of the UI's tests: the seeded store (seeded_store.py) once per session, the app on a store.
Without the ui extra every test module here is skipped, with its name, before it imports the UI."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from seeded_store import Seeded, seed

from search.cli.ui import app_path
from search.settings import STORE_ENV

if TYPE_CHECKING:
    from streamlit.testing.v1 import AppTest


@pytest.fixture(scope="session")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    return seed(f"sqlite:///{tmp_path_factory.mktemp('ui-store') / 'crucible.db'}")


@pytest.fixture
def open_page(monkeypatch: pytest.MonkeyPatch) -> Callable[..., AppTest]:
    """Run the app on a store (`db`), switched to `page` with `query` in the URL; returns the AppTest."""

    testing = pytest.importorskip("streamlit.testing.v1", reason="needs the ui extra (streamlit)")

    def run(db: str, page: str = "views/runs.py", **query: str) -> AppTest:
        monkeypatch.setenv(STORE_ENV, db)
        at = testing.AppTest.from_file(str(app_path()), default_timeout=60)
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


NEEDS = "needs the ui extra (streamlit): pip install -e '.[ui]'"


class _WithoutTheExtra(pytest.Module):
    """A test module of the UI where Streamlit is not installed: skipped, never imported."""

    def collect(self) -> list[pytest.Item]:
        pytest.skip(NEEDS, allow_module_level=True)


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    if importlib.util.find_spec("streamlit") is None:
        return _WithoutTheExtra.from_parent(parent, path=module_path)
    return None
