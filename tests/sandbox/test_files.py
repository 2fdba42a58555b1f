"""A job reads the files its target declares, wherever it runs: a scratch folder or a container."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import targets
from sandbox.docker import DockerSandbox
from sandbox.files import KnownFiles, absolute, read_files, relocated
from sandbox.job import Job, Result
from sandbox.process import ProcessSandbox
from targets.base import Instance

KV = targets.load("kv")
SHIPPED = Path(KV.default_config()["workload"])
PROFILES = Path(targets.__file__).parent / "costmodel" / "profiles"
REQUESTS = 300
LISTS_MOUNTS = "import glob\nraise RuntimeError(repr(sorted(glob.glob('/workloads/**', recursive=True))))\n"


def small_trace(path: Path) -> Path:
    """The head of the shipped trace, a file of the test's own, readable by anyone (as docker needs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(SHIPPED.read_text().splitlines(keepends=True)[:REQUESTS]))
    path.chmod(0o644)
    return path


def user_profile(path: Path) -> Path:
    """A profile file of the user's own: the shipped CPU profile, copied."""
    shutil.copy(PROFILES / "cpu-2core.json", path)
    path.chmod(0o644)
    return path


def lru_job(workload: str, **config: object) -> Job:
    return Job("kv", KV.baselines()["lru"], (Instance(workload, {"capacity": 100, **config}, "small"),))


def metrics(result: Result) -> dict[str, float]:
    assert result.status == "ok", result.message
    (instance,) = result.instances
    return instance.metrics


def test_a_relative_workload_is_read_from_the_callers_folder(
    process_box: ProcessSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small_trace(tmp_path / "rel" / "trace.jsonl")
    monkeypatch.chdir(tmp_path)
    relative = process_box.run(lru_job("rel/trace.jsonl"))
    assert metrics(relative) == metrics(process_box.run(lru_job(str(tmp_path / "rel" / "trace.jsonl"))))


def test_a_missing_workload_is_reported_as_the_user_typed_it(
    process_box: ProcessSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = process_box.run(lru_job("rel/missing.jsonl"))
    assert result.message == "WorkloadError: rel/missing.jsonl: no such trace file"


def test_every_value_naming_a_file_the_job_reads_is_rewritten_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small_trace(tmp_path / "trace.jsonl")
    user_profile(tmp_path / "mine.json")
    monkeypatch.chdir(tmp_path)
    job = lru_job("trace.jsonl", profile="mine.json", note="trace.jsonl is not a path here")
    assert read_files(job) == ((tmp_path / "trace.jsonl").resolve(), (tmp_path / "mine.json").resolve())
    (moved,) = relocated(job, {p: f"/in/{p.name}" for p in read_files(job)}).instances
    assert moved.workload == "/in/trace.jsonl"
    assert moved.config == {
        "capacity": 100,
        "profile": "/in/mine.json",
        "note": "trace.jsonl is not a path here",
    }
    (whole,) = absolute(job, read_files(job)).instances
    assert (whole.workload, whole.config["profile"]) == tuple(str(p) for p in read_files(job))


def test_generated_workloads_and_shipped_profile_names_are_no_files(tmp_path: Path) -> None:
    job = lru_job("gen:chat:1", profile="cpu-2core")
    assert read_files(job) == ()
    assert absolute(job, read_files(job)) == job


@pytest.mark.docker
def test_the_container_sees_exactly_the_files_the_job_reads(
    docker_box: DockerSandbox, tmp_path: Path
) -> None:
    trace, profile = small_trace(tmp_path / "trace.jsonl"), user_profile(tmp_path / "mine.json")
    (tmp_path / "unrelated.txt").write_text("not for the job")
    job = lru_job(str(trace), profile=str(profile))
    seen = docker_box.run(Job("kv", LISTS_MOUNTS, job.instances, skip_check=True))
    # what the job listed inside, its mount points named back as the host's files in the message
    inside = ["/workloads/", "/workloads/0", str(trace), "/workloads/1", str(profile)]
    assert seen.message == f"RuntimeError: {inside!r}"


@pytest.mark.docker
def test_a_user_profile_file_prices_the_job_in_docker_as_in_a_process(
    docker_box: DockerSandbox, process_box: ProcessSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small_trace(tmp_path / "trace.jsonl")
    user_profile(tmp_path / "mine.json")
    monkeypatch.chdir(tmp_path)  # relative paths, as a user types them
    job = lru_job("trace.jsonl", profile="mine.json")
    in_docker = metrics(docker_box.run(job))
    assert in_docker == metrics(process_box.run(job))
    assert in_docker == metrics(process_box.run(lru_job("trace.jsonl", profile="cpu-2core")))
    assert in_docker["prefill_ms_saved"] > 0


@pytest.mark.docker
def test_a_profile_file_that_is_not_a_profile_is_reported_from_inside(
    docker_box: DockerSandbox, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"not": "a profile"}))
    broken.chmod(0o644)
    result = docker_box.run(lru_job(str(small_trace(tmp_path / "trace.jsonl")), profile=str(broken)))
    assert result.status != "ok"
    assert f"{broken}: not a profile file" in result.message  # named as the user knows it


def test_the_files_of_each_set_of_instances_are_found_once_per_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    known = KnownFiles()
    for folder in ("a", "b"):
        small_trace(tmp_path / folder / "trace.jsonl")
    monkeypatch.chdir(tmp_path / "a")
    job = lru_job("trace.jsonl")
    assert known.of(job) == ((tmp_path / "a" / "trace.jsonl").resolve(),)
    (tmp_path / "a" / "trace.jsonl").unlink()
    assert known.of(job) == ((tmp_path / "a" / "trace.jsonl").resolve(),), "found once, not looked up again"
    monkeypatch.chdir(tmp_path / "b")
    assert known.of(job) == ((tmp_path / "b" / "trace.jsonl").resolve(),), "relative to where the search runs"
