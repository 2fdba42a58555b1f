"""Which backend runs, and why, said on stderr; a search gives the same results on Docker as in a process."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.base import SandboxUnavailable
from sandbox.choice import choose_sandbox
from sandbox.docker import DockerSandbox

NO_ENGINE = "unix:///nonexistent/docker.sock"


def crucible(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "search.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False, env=env)


def test_auto_falls_back_to_the_process_backend_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    box, reason = choose_sandbox("auto")
    assert box.name == "process"
    assert reason.startswith("auto; docker unavailable: no Docker engine answers")


def test_asking_for_docker_where_no_engine_answers_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    with pytest.raises(SandboxUnavailable, match="no Docker engine answers"):
        choose_sandbox("docker")


def test_search_on_docker_without_an_engine_fails_in_one_line(tmp_path: Path) -> None:
    done = crucible(
        "search", "--sandbox", "docker", "--budget", "1", "--db", f"sqlite:///{tmp_path / 'runs.db'}",
        env={**os.environ, "DOCKER_HOST": NO_ENGINE},
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("crucible: error: no Docker engine answers")


def test_check_says_which_backends_work_here_and_why_not() -> None:
    done = crucible("sandbox", "check", "--json", env={**os.environ, "DOCKER_HOST": NO_ENGINE})
    assert done.returncode == 0, done.stderr
    found = {a["backend"]: a for a in json.loads(done.stdout)}
    assert found["docker"]["works"] is False
    assert found["docker"]["detail"].startswith("no Docker engine answers")
    assert found["process"]["works"] is True
    assert "a baseline job took" in found["process"]["detail"]


@pytest.mark.docker
def test_auto_takes_docker_when_the_engine_answers_and_the_image_exists(docker_box: DockerSandbox) -> None:
    box, reason = choose_sandbox("auto")
    assert box.name == "docker"
    assert reason == f"auto; the Docker engine answers and {docker_box.image} exists"


@pytest.mark.docker
def test_a_search_gives_the_same_results_on_docker_as_in_a_process(
    docker_box: DockerSandbox, tmp_path: Path
) -> None:
    summaries = {}
    for backend in ("docker", "process"):
        db = tmp_path / f"{backend}.db"
        done = crucible(
            "search", "--sandbox", backend, "--budget", "4", "--trials", "2", "--seed", "3", "--json",
            "--db", f"sqlite:///{db}",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert f"sandbox: {backend} (asked for)" in done.stderr
        with sqlite3.connect(db) as connection:
            stored = {row[0] for row in connection.execute("select distinct backend from evaluation")}
        assert stored == {backend}  # every evaluation records where it ran
        summaries[backend] = {k: v for k, v in json.loads(done.stdout).items() if k != "run_id"}
    assert summaries["docker"]["best"] is not None
    assert summaries["docker"] == summaries["process"]
