"""Executing a stored run in a detached process (`crucible search --resume RUN`, a session of its own), so it
outlives whoever started it (a page of the UI, the tab, the UI server); its output goes to a log file beside
the store. A run launched from the UI's form is created by the service first (the page knows its id); the
process only executes it, as a resume does. The first line of an error it exits with is said as it is.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path


def resume_argv(db: str, run_id: str, sandbox: str | None = None) -> list[str]:
    """The command that executes a stored run (from where it stopped, or from its start)."""
    chosen = ["--sandbox", sandbox] if sandbox else []
    return [sys.executable, "-m", "search.cli", "search", "--db", db, "--resume", run_id, *chosen]


def beside_store(db: str, kind: str) -> Path:
    """A folder for the UI's files of one kind: `<store>.<kind>/` beside a SQLite store, else in the
    temporary folder (a server database has no folder of its own)."""
    if db.startswith("sqlite:///") and db != "sqlite:///:memory:":
        path = Path(db.removeprefix("sqlite:///")).expanduser().resolve()
        return path.with_name(f"{path.name}.{kind}")
    return Path(tempfile.gettempdir()) / "crucible-ui" / kind


@dataclass(frozen=True)
class Started:
    """A launched process, its log, and its command line."""

    process: subprocess.Popen[bytes]
    log: Path
    argv: list[str]


def start(argv: list[str], db: str, env: Mapping[str, str] | None = None) -> Started:
    """Start `argv` detached (a new session: no signal of the UI's reaches it) with its output logged."""
    folder = beside_store(db, "logs")
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / f"search-{datetime.now(UTC):%Y%m%dT%H%M%S%f}.log"
    with log.open("wb") as out:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    # Reaped when it ends, so a killed search is not left a zombie that still looks alive to the store.
    threading.Thread(target=child.wait, daemon=True).start()
    return Started(child, log, argv)


def error_line(log: Path) -> str:
    """The `crucible: error: ...` line a failed start printed, else its last line."""
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("crucible: error:")]
    return (errors or lines or ["it exited without a word"])[-1].removeprefix("crucible: error: ")


def wait_running(started: Started, running: Callable[[], bool], timeout_s: float = 60.0) -> str | None:
    """None once the run the process executes is running, else the line its process failed with."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if running():
            return None
        if started.process.poll() is not None:
            return error_line(started.log)
        time.sleep(0.3)
    return f"it has not started within {timeout_s:.0f} s; its output is in {started.log}"


def launch(db: str, run_id: str, read: Callable[[str], str], sandbox: str | None = None) -> str | None:
    """Execute the stored run `run_id` of the store at `db` in a detached process; None once it is running
    (`read` gives a run's status), else the line its process failed with."""
    started = start(resume_argv(db, run_id, sandbox), db)
    return wait_running(started, lambda: read(run_id) == "running")


def keep_upload(db: str, name: str, content: bytes) -> Path:
    """Save an uploaded workload under its own name (made unique by time), returning its absolute path."""
    folder = beside_store(db, "uploads")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{Path(name).name}"
    path.write_bytes(content)
    return path.resolve()
