"""The Docker backend: what a job sees from inside, what it may touch, what it leaves, and its numbers."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import docker
import pytest
from docker.errors import NotFound
from docker.models.containers import Container

import targets
from sandbox.base import SandboxUnavailable
from sandbox.docker import OWNER_LABEL, DockerSandbox
from sandbox.image import LABEL
from sandbox.job import Job, Limits, Result, Tuning
from sandbox.process import ProcessSandbox
from targets.base import Instance

pytestmark = pytest.mark.docker

KV = targets.load("kv")
MB = 1024 * 1024
SMALL = (Instance("gen:chat:1", {"capacity": 100, "requests": [0, 100]}),)
INSIDE = """import json, os, resource, tempfile
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
try:
    open("/opt/probe", "w")
    root = "writable"
except OSError as exc:
    root = exc.strerror
info = {
    "uid": os.getuid(),
    "caps": status["CapEff"].strip(),
    "no_new_privs": status["NoNewPrivs"].strip(),
    "root": root,
    "places": sorted({os.getcwd(), os.environ["HOME"], tempfile.gettempdir()}),
    "net": sorted(os.listdir("/sys/class/net")),
    "cpu": resource.getrlimit(resource.RLIMIT_CPU),
    "memory": open("/sys/fs/cgroup/memory/memory.limit_in_bytes").read().strip(),
    "pids": open("/sys/fs/cgroup/pids/pids.max").read().strip(),
}
raise RuntimeError(json.dumps(info))
"""


def _containers(client: docker.DockerClient, filters: dict[str, str]) -> list[Container]:
    """The containers matching filters; docker-py inspects each after listing, and one may go in between."""
    while True:
        with contextlib.suppress(NotFound):
            return client.containers.list(all=True, filters=filters)


def shipped_instances(tmp_path: Path) -> tuple[Instance, ...]:
    """The kv target's shipped workload, copied to a file of the test's own (mounted, not baked in)."""
    config = KV.default_config()
    workload = tmp_path / "trace.jsonl"
    shutil.copy(config.pop("workload"), workload)
    return tuple(KV.instances(str(workload), config))


def test_the_job_runs_as_nobody_without_network_capabilities_or_a_writable_root(
    docker_box: DockerSandbox,
) -> None:
    if not Path("/sys/fs/cgroup/memory").is_dir():
        pytest.skip("reads cgroup v1 limits from inside; this engine's host uses cgroup v2")
    limits = Limits(memory_mb=1024, cpu_s=77, processes=40)
    instances = (Instance("gen:chat:1", {"capacity": 100}),)
    result = docker_box.run(Job("kv", INSIDE, instances, skip_check=True, limits=limits))
    assert result.message.startswith("RuntimeError: "), result.message
    inside = json.loads(result.message.removeprefix("RuntimeError: "))
    (place,) = inside.pop("places")
    assert place.startswith("/scratch/crucible-job-"), "its home, working and temp folder: one of its own"
    assert inside == {
        "uid": 65534,
        "caps": "0000000000000000",
        "no_new_privs": "1",
        "root": "Read-only file system",
        "net": ["lo"],
        "cpu": [77, 78],
        "memory": str(1024 * MB),
        "pids": "40",
    }


def test_workloads_are_mounted_read_only(docker_box: DockerSandbox, tmp_path: Path) -> None:
    instances = shipped_instances(tmp_path)
    (tmp_path / "trace.jsonl").chmod(0o666)  # writable by anyone: only the mount can refuse
    append = "import glob\nopen(glob.glob('/workloads/*/trace.jsonl')[0], 'a').write('{}')\n"
    result = docker_box.run(Job("kv", append, instances, skip_check=True))
    assert result.status == "denied", result.message
    assert "Read-only file system" in result.message


def test_a_workload_nobody_may_read_is_refused_before_any_container_starts(
    docker_box: DockerSandbox, tmp_path: Path
) -> None:
    instances = shipped_instances(tmp_path)
    (tmp_path / "trace.jsonl").chmod(0o600)
    result = docker_box.run(Job("kv", KV.baselines()["lru"], instances))
    assert result.status == "crashed"
    assert "chmod o+r" in result.message


def test_tuned_job_gives_the_process_backends_numbers(
    docker_box: DockerSandbox, process_box: ProcessSandbox, tmp_path: Path
) -> None:
    job = Job("kv", KV.baselines()["gdsf"], shipped_instances(tmp_path), tuning=Tuning(trials=4, seed=5))
    in_docker, in_process = docker_box.run(job), process_box.run(job)
    assert in_docker.status == "ok", in_docker.message
    assert (in_docker.backend, in_process.backend) == ("docker", "process")
    assert numbers(in_docker) == numbers(in_process)


def test_a_job_that_marks_the_scratch_disk_gets_the_next_job_a_fresh_container(
    docker_box: DockerSandbox,
) -> None:
    box = DockerSandbox(image=docker_box.image, client=docker_box.client)
    mark = "import os\nif os.path.exists('/scratch/mark'):\n    raise SystemError('reused')\n"
    mark += "open('/scratch/mark', 'w')\n"
    try:
        for _ in range(3):
            result = box.run(Job("kv", mark + "raise SystemError('fresh')\n", SMALL, skip_check=True))
            assert result.message == "SystemError: fresh"
    finally:
        box.close()


def test_jobs_run_side_by_side_leave_as_many_warm_containers_serving_the_next(
    docker_box: DockerSandbox,
) -> None:
    box = DockerSandbox(image=docker_box.image, client=docker_box.client)
    mine = {"label": f"{OWNER_LABEL}={box.owner}"}
    job = Job("kv", KV.baselines()["lru"], SMALL)
    try:
        with ThreadPoolExecutor(2) as pool:
            assert [r.status for r in pool.map(box.run, [job, job])] == ["ok", "ok"]
        kept = {c.id for c in _containers(box.client, mine) if c.status == "running"}
        assert len(kept) == 2
        with ThreadPoolExecutor(2) as pool:
            assert [r.status for r in pool.map(box.run, [job, job])] == ["ok", "ok"]
        assert {c.id for c in _containers(box.client, mine)} == kept, "the same containers served them"
    finally:
        box.close()


def test_no_container_outlives_the_sandbox(docker_box: DockerSandbox) -> None:
    box = DockerSandbox(image=docker_box.image, client=docker_box.client)
    killed = box.run(Job("kv", "while True:\n    pass\n", SMALL, skip_check=True, limits=Limits(wall_s=2)))
    assert killed.status == "timeout"
    assert box.run(Job("kv", KV.baselines()["lru"], SMALL)).status == "ok"
    box.close()  # its kept container goes too
    assert _containers(box.client, {"label": f"{OWNER_LABEL}={box.owner}"}) == []


def test_containers_left_by_a_dead_search_are_reaped_and_others_kept(docker_box: DockerSandbox) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    owners = {
        "dead": f"{socket.gethostname()}:{dead.stdout.strip()}:1",
        "elsewhere": "another-host:1:1",
        "alive": docker_box.owner,
    }
    made = {
        name: docker_box.client.containers.create(
            docker_box.image, labels={LABEL: "test", OWNER_LABEL: owner}
        )
        for name, owner in owners.items()
    }
    try:
        DockerSandbox(image=docker_box.image, client=docker_box.client)
        left = {c.id for c in _containers(docker_box.client, {"label": LABEL})}
        assert {name for name, c in made.items() if c.id in left} == {"elsewhere", "alive"}
    finally:
        for container in made.values():
            with contextlib.suppress(NotFound):
                container.remove(force=True)


def test_a_missing_image_is_an_error_that_says_how_to_build_it(docker_box: DockerSandbox) -> None:
    with pytest.raises(
        SandboxUnavailable, match=r"no sandbox image crucible-sandbox:0\.0\.0-0+ .*crucible sandbox build"
    ):
        DockerSandbox(image="crucible-sandbox:0.0.0-000000000000", client=docker_box.client)


def numbers(result: Result) -> tuple[object, ...]:
    """What a job computed, without how long it took."""
    return result.status, result.params, result.trials, [replace(i, seconds=0.0) for i in result.instances]
