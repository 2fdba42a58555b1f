"""Which backend runs, and why, said on stderr; a search gives the same results on Docker as in a process."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import targets
from sandbox.base import SandboxUnavailable
from sandbox.choice import choose_sandbox, notice
from sandbox.docker import DockerSandbox

NO_ENGINE = "unix:///nonexistent/docker.sock"
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def crucible(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "search.cli", *args]
    environment = {**(env or os.environ), "PYTHONPATH": str(PROJECT_ROOT)}  # run from any folder
    return subprocess.run(
        command, capture_output=True, text=True, timeout=600, check=False, env=environment, cwd=cwd
    )


def test_auto_falls_back_to_the_process_backend_and_says_why_in_a_few_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    box, reason = choose_sandbox("auto")
    assert box.name == "process"
    assert notice(box, reason) == "sandbox: process (no Docker engine; --sandbox docker to require it)"


@pytest.fixture(scope="module")
def baselines_elsewhere(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """`crucible baselines` as a new user runs it: no Docker engine, output piped, a relative workload
    path typed in a folder of their own."""
    folder = tmp_path_factory.mktemp("elsewhere")
    (folder / "rel").mkdir()
    shipped = Path(targets.load("kv").default_config()["workload"])
    (folder / "rel" / "trace.jsonl").write_text("".join(shipped.read_text().splitlines(True)[:200]))
    return crucible(
        "baselines", "--target", "kv", "--workload", "rel/trace.jsonl", "--capacity", "100", "--json",
        env={**os.environ, "DOCKER_HOST": NO_ENGINE}, cwd=folder,
    )  # fmt: skip


def test_a_user_who_never_asked_for_docker_reads_one_short_line_about_it(
    baselines_elsewhere: subprocess.CompletedProcess[str],
) -> None:
    assert baselines_elsewhere.returncode == 0, baselines_elsewhere.stderr
    about_docker = [line for line in baselines_elsewhere.stderr.splitlines() if "ocker" in line]
    assert about_docker == ["sandbox: process (no Docker engine; --sandbox docker to require it)"]


def test_a_relative_workload_path_works_from_the_users_folder_on_the_process_backend(
    baselines_elsewhere: subprocess.CompletedProcess[str],
) -> None:
    assert baselines_elsewhere.returncode == 0, baselines_elsewhere.stderr
    assert {"lru", "belady", "trace.jsonl@100"} <= set(_words(json.loads(baselines_elsewhere.stdout)))


def _words(data: object) -> list[str]:
    """Every key and text value in a JSON document, however the command nests its answer."""
    if isinstance(data, dict):
        return [w for k, v in data.items() for w in (str(k), *_words(v))]
    if isinstance(data, list):
        return [w for item in data for w in _words(item)]
    return [data] if isinstance(data, str) else []


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


def test_building_the_image_without_an_engine_ends_in_one_line_and_prints_no_json() -> None:
    done = crucible("sandbox", "build", "--json", env={**os.environ, "DOCKER_HOST": NO_ENGINE})
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith("crucible: error: no Docker engine answers")


@pytest.mark.docker
def test_a_build_keeps_the_image_of_this_source_and_names_it_as_json(docker_box: DockerSandbox) -> None:
    done = crucible("sandbox", "build", "--offline", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"image": docker_box.image, "offline": True}
    assert done.stderr.strip() == f"{docker_box.image} is up to date " + (
        "(its name hashes the code and pins it holds; --rebuild builds it again)"
    )


@pytest.mark.docker
@pytest.mark.slow
def test_rebuild_builds_the_image_again_and_names_it_as_json(docker_box: DockerSandbox) -> None:
    done = crucible("sandbox", "build", "--offline", "--rebuild", "--json")  # from the engine's cache
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"image": docker_box.image, "offline": True}
    assert "building the project wheel" in done.stderr


@pytest.mark.docker
def test_auto_takes_docker_when_the_engine_answers_and_the_image_exists(docker_box: DockerSandbox) -> None:
    box, reason = choose_sandbox("auto")
    assert box.name == "docker"
    assert notice(box, reason) == "sandbox: docker (auto)"


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
        summaries[backend] = _outcome(json.loads(done.stdout))
    assert summaries["docker"]["best"] is not None
    assert summaries["docker"] == summaries["process"]


def _outcome(data: object) -> object:
    """A run's JSON without what differs between any two runs: ids, hosts, clock times, backends (the
    sandbox asked for and the one used)."""
    if isinstance(data, dict):
        return {k: _outcome(v) for k, v in data.items() if not _volatile(k)}
    if isinstance(data, list):
        return [_outcome(v) for v in data]
    return data


def _volatile(key: str) -> bool:
    volatile = key in ("run_id", "backend", "sandbox", "pid", "host", "at") or key.endswith(("_at", "_s"))
    return volatile or "seconds" in key
