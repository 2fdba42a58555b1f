"""What the whole suite promises the user who runs it, as a pytest plugin (tests/conftest.py loads it):
nothing of theirs is touched. A test that writes the default store (`crucible.db` where the suite was
started, or in the repository) fails, naming it; and a session that leaves a file in the repository that
was not there before fails at its end, naming the files. Every test writes under its own temporary folder."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STORES = tuple(
    dict.fromkeys(folder / name for folder in (Path.cwd(), ROOT) for name in ("crucible.db", "best.py"))
)
"""The user's files the README's commands write: the default store and the best heuristic, where the suite
runs and in the repository."""
_BEFORE = pytest.StashKey[set[str]]()


def _state(path: Path) -> tuple[int, int] | None:
    """What shows a file was written: its size and modification time; None while there is none."""
    try:
        found = path.stat()
    except FileNotFoundError:
        return None
    return found.st_size, found.st_mtime_ns


def _untracked() -> set[str]:
    """The files git shows in the repository that it does not track and does not ignore."""
    done = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return {line[3:] for line in done.stdout.splitlines() if line.startswith("?? ")}


@pytest.fixture(autouse=True)
def _the_users_store_is_not_touched() -> Iterator[None]:
    before = [_state(path) for path in STORES]
    yield
    for path, was in zip(STORES, before, strict=True):
        if _state(path) != was:
            pytest.fail(f"the test wrote the user's store {path}: give every command a --db under tmp_path")


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_BEFORE] = _untracked() if (ROOT / ".git").exists() else set()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not (ROOT / ".git").exists():
        return
    left = sorted(_untracked() - session.config.stash[_BEFORE])
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"the suite left files in the repository: {', '.join(left[:10])}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
