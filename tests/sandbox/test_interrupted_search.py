"""A search stopped mid-job, by Ctrl-C or by kill -9, leaves no warm parent, job or container behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import docker
import pytest

from sandbox.docker import OWNER_LABEL, DockerSandbox
from sandbox.image import LABEL

ROOT = Path(__file__).resolve().parents[2]
GONE_WITHIN_S = 30.0
T = TypeVar("T")


def _search(tmp_path: Path, sandbox: str) -> subprocess.Popen[bytes]:
    """A search of the shipped kv workload, long enough to be stopped in the middle of its jobs."""
    command = [sys.executable, "-m", "search.cli", "search", "--target", "kv", "--budget", "200"]
    command += ["--sandbox", sandbox, "--workers", "2", "--db", f"sqlite:///{tmp_path / 'runs.db'}"]
    return subprocess.Popen(
        command,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            found |= {child} | _descendants(child)
    return found


def _alive(pids: set[int]) -> set[int]:
    """Those of the pids that still run (a zombie has ended)."""
    running = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            running.add(pid)
    return running


def _wait_for(search: subprocess.Popen[bytes], condition: Callable[[], T], seconds: float, what: str) -> T:
    """What the condition finds once it finds anything, while the search still runs."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        if search.poll() is not None:
            pytest.fail(f"the search ended first: {search.stderr.read().decode() if search.stderr else ''}")
        time.sleep(0.2)
    pytest.fail(f"no {what} within {seconds:g} s")


def _zygotes_and_jobs(search: subprocess.Popen[bytes]) -> set[int]:
    """The search's warm parents once each has forked a job: they and their jobs, all at once."""
    pids = _descendants(search.pid)
    commands = {pid: _command(pid) for pid in pids}
    zygotes = {
        pid for pid, command in commands.items() if "sandbox.zygote" in command and _parent(pid) == search.pid
    }
    forked = {pid for pid in pids if _parent(pid) in zygotes}
    return pids if len(zygotes) == 2 and forked else set()


def _stop(search: subprocess.Popen[bytes], stop: signal.Signals) -> None:
    """Ctrl-C as a terminal sends it (to the whole process group), or kill -9 to the search alone."""
    os.killpg(search.pid, stop) if stop == signal.SIGINT else search.send_signal(stop)
    search.wait(60)


def _reap(search: subprocess.Popen[bytes]) -> None:
    if search.poll() is None:
        search.kill()
        search.wait()


def _until(done: Callable[[], bool]) -> None:
    """Wait up to GONE_WITHIN_S for `done`."""
    deadline = time.monotonic() + GONE_WITHIN_S
    while not done() and time.monotonic() < deadline:
        time.sleep(0.2)


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        return 0


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_a_stopped_search_leaves_no_process_of_its_sandbox(tmp_path: Path, stop: signal.Signals) -> None:
    search = _search(tmp_path, "process")
    try:
        left = _wait_for(search, lambda: _zygotes_and_jobs(search), 180, "warm parent running a job")
        _stop(search, stop)
    finally:
        _reap(search)
    _until(lambda: not _alive(left))
    assert not _alive(left), [_command(pid) for pid in _alive(left)]


@pytest.mark.docker
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_a_stopped_search_leaves_no_container(
    docker_box: DockerSandbox, tmp_path: Path, stop: signal.Signals
) -> None:
    client = docker.from_env()
    search = _search(tmp_path, "docker")

    def ours() -> list[str]:
        containers = client.containers.list(all=True, sparse=True, filters={"label": LABEL})
        owner = f":{search.pid}:"
        return [c.id for c in containers if owner in c.attrs.get("Labels", {}).get(OWNER_LABEL, "")]

    try:
        _wait_for(search, lambda: len(ours()) == 2, 300, "two containers of the search")
        time.sleep(1.0)  # their jobs under way
        _stop(search, stop)
    finally:
        _reap(search)
    _until(lambda: not ours())
    assert not ours(), "containers outlived the search that started them"
