"""Searches started from the UI: `crucible search` in a detached process of its own session, so it
outlives the page, the browser tab and the UI server; its output goes to a log file beside the store.

The run it creates is found in the store like any other (the UI never talks to the process again), and
the first line of an error it exits with (a bad option, an unreachable endpoint) is shown as it is.
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
from typing import Any


@dataclass(frozen=True)
class SearchSettings:
    """What the Launch form asks; each field is one `crucible search` flag."""

    target: str
    workload: str | None
    options: Mapping[str, Any]
    budget: int
    proposer: str = "evolve"
    sandbox: str = "auto"
    seed: int = 0
    trials: int = 32
    workers: int = 2
    models: tuple[str, ...] = ()
    base_url: str | None = None
    api_key_env: str | None = None
    max_cost_usd: float | None = None
    prices: tuple[str, ...] = ()
    """MODEL=PROMPT,COMPLETION in USD per million tokens, one per priced model."""
    holdout: float | None = None
    """The share of the workload's requests, the last in time, held out to judge the best on."""
    select: str | None = None
    """What candidates are ranked on: the whole window, or `unseen` (after the train share, warm); None: the
    default for the split (unseen with a held-out share, else the window)."""


def _value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def crucible() -> list[str]:
    """The command that runs the CLI with this interpreter (the UI's own install)."""
    return [sys.executable, "-m", "search.cli"]


def search_argv(db: str, s: SearchSettings) -> list[str]:
    argv = [*crucible(), "search", "--db", db, "--target", s.target, "--budget", str(s.budget)]
    if s.workload:
        argv += ["--workload", s.workload]
    for name, value in sorted(s.options.items()):
        argv += ["--set", f"{name}={_value(value)}"]
    argv += ["--proposer", s.proposer, "--sandbox", s.sandbox, "--seed", str(s.seed)]
    argv += ["--trials", str(s.trials), "--workers", str(s.workers)]
    if s.holdout is not None:
        argv += ["--holdout", str(s.holdout)]
    if s.select is not None:
        argv += ["--select", s.select]
    for model in s.models:
        argv += ["--model", model]
    if s.base_url:
        argv += ["--base-url", s.base_url]
    if s.api_key_env:
        argv += ["--api-key-env", s.api_key_env]
    for price in s.prices:
        argv += ["--price", price]
    if s.max_cost_usd is not None:
        argv += ["--max-cost-usd", str(s.max_cost_usd)]
    return argv


def resume_argv(db: str, run_id: str) -> list[str]:
    return [*crucible(), "search", "--db", db, "--resume", run_id]


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


def wait_for_run(
    started: Started, known: set[str], run_ids: Callable[[], set[str]], timeout_s: float = 90.0
) -> str:
    """The id of the run the process stored (one not in `known`); RuntimeError with its error line if it
    exited first, or if none appeared within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        new = run_ids() - known
        if new:
            return sorted(new)[0]
        if started.process.poll() is not None:
            raise RuntimeError(error_line(started.log))
        time.sleep(0.3)
    raise RuntimeError(f"no run appeared in {timeout_s:.0f} s; its output is in {started.log}")


def keep_upload(db: str, name: str, content: bytes) -> Path:
    """Save an uploaded workload under its own name (made unique by time), returning its absolute path."""
    folder = beside_store(db, "uploads")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{Path(name).name}"
    path.write_bytes(content)
    return path.resolve()
