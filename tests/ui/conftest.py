"""The UI's tests read a store seeded by real short searches on the shipped kv workload in the process
sandbox: one finished run of six candidates (the offline proposer), and one of the LLM proposer against
the scripted OpenAI-compatible endpoint of tests/search (real client, real HTTP) that Z3 refutes a
candidate of, the static check rejects another of, and its token cap stops (resumable)."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("streamlit")

from streamlit.testing.v1 import AppTest

from search import cli
from search.readmodel import ReadModel, RunInfo
from search.store import Store, open_engine
from search.ui_command import DB_ENV, app_path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "search"))
from scripted_llm import Reply, ScriptedLLM, program  # the LLM tests' endpoint

REFUTED = '"""Age per hit."""\n\n\ndef priority(b, p):\n    return b.age / b.hits\n'
"""Inside the subset, but Z3 finds a division by zero (hits = 0 is in the domain)."""
OUTSIDE_SUBSET = "import os\n\n\ndef priority(b, p):\n    return os.getpid()\n"
KEY_ENV = "CRUCIBLE_UI_TEST_KEY"
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
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    url = f"sqlite:///{tmp_path_factory.mktemp('ui-store') / 'crucible.db'}"
    cli.main([*SEARCH, "--db", url, "--budget", "6"])
    numbers = itertools.count(1)
    script = [Reply(REFUTED), Reply(OUTSIDE_SUBSET)]
    os.environ[KEY_ENV] = "sk-scripted"
    with ScriptedLLM(script, lambda body: Reply(program(next(numbers)))) as llm:
        llm_flags = [
            "--proposer",
            "llm",
            "--model",
            "scripted",
            "--base-url",
            llm.url,
            "--api-key-env",
            KEY_ENV,
        ]
        cli.main(
            [
                *SEARCH,
                "--db",
                url,
                "--budget",
                "20",
                *llm_flags,
                "--price",
                "scripted=1,2",
                "--max-tokens",
                "250",
            ]
        )
    read = ReadModel(Store(open_engine(url, create=False)))
    finished, stopped = read.runs()
    assert (finished.status, stopped.status) == ("finished", "stopped")
    yield Seeded(url, finished, stopped)
    del os.environ[KEY_ENV]


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
