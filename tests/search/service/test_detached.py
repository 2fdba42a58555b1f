"""What the service starts for a front end (the UI): a stored run executed by `crucible search --resume` in
a detached, logged process; it never rebuilds a command line from a form (the run service creates the run
from the form's values)."""

from __future__ import annotations

import sys
from pathlib import Path

from search.service import detached as launcher


def test_resume_is_the_stored_run_continued() -> None:
    argv = launcher.resume_argv("sqlite:///runs.db", "abc123")
    assert argv[:3] == [sys.executable, "-m", "search.cli"]
    assert argv[3:] == ["search", "--db", "sqlite:///runs.db", "--resume", "abc123"]
    moved = launcher.resume_argv("sqlite:///runs.db", "abc123", sandbox="process")
    assert moved[-2:] == ["--sandbox", "process"], "only where it runs may change"


def test_logs_and_uploads_sit_beside_a_sqlite_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    assert launcher.beside_store(url, "logs") == tmp_path / "runs.db.logs"
    kept = launcher.keep_upload(url, "../../trace.jsonl", b'{"x": 1}\n')
    assert kept.parent == tmp_path / "runs.db.uploads" and kept.name.endswith("-trace.jsonl")
    assert kept.read_bytes() == b'{"x": 1}\n'


def test_a_started_process_logs_beside_the_store_and_its_error_line_is_read(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    code = (
        "import sys; print('progress'); print('crucible: error: no such trace', file=sys.stderr); sys.exit(2)"
    )
    started = launcher.start([sys.executable, "-c", code], url)
    assert started.process.wait(timeout=30) == 2
    assert started.log.parent == tmp_path / "runs.db.logs"
    assert launcher.error_line(started.log) == "no such trace"


def test_waiting_for_a_run_ends_when_it_runs_or_with_the_line_its_process_failed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    gone = "import sys; print('crucible: error: gone'); sys.exit(2)"
    failing = launcher.start([sys.executable, "-c", gone], url)
    assert launcher.wait_running(failing, lambda: False, timeout_s=30) == "gone"
    sleeping = launcher.start([sys.executable, "-c", "import time; time.sleep(30)"], url)
    assert launcher.wait_running(sleeping, lambda: True, timeout_s=30) is None
    sleeping.process.kill()
