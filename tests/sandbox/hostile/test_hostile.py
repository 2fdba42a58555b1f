"""Hostile candidates on both backends: each ends contained and classified, and the next job runs as usual,
with the numbers it gives anywhere (the jobs share a warm zygote, which forks a fresh child for each).

The static checker is bypassed (Job.skip_check), so the sandbox itself is what stops them. Where the
process backend cannot give a protection that Docker gives, the test says why and is marked xfail.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import targets
from sandbox.base import Sandbox
from sandbox.job import Job, Limits, Result
from sandbox.process import ProcessSandbox
from sandbox.worker import run
from targets.base import Instance

SMALL = (Instance("gen:chat:1", {"capacity": 100, "requests": [0, 100]}, "chat[:100]@100"),)
NEXT = Job("kv", targets.load("kv").baselines()["lru"], SMALL)
"""The ordinary candidate that must run normally after every hostile one."""
NO_FILES = "the process backend has no filesystem isolation: the worker runs as the user running the search"
EXPECTED = run(NEXT).instances[0].metrics
"""NEXT's numbers, computed here, as any fresh process computes them."""


@pytest.fixture(params=["process", pytest.param("docker", marks=pytest.mark.docker)])
def box(request: pytest.FixtureRequest) -> Sandbox:
    return request.getfixturevalue(f"{request.param}_box")


def hostile(source: str, **limits: float) -> Job:
    return Job("kv", source, SMALL, skip_check=True, limits=Limits(**limits))  # type: ignore[arg-type]


def contained(box: Sandbox, job: Job) -> Result:
    """Run a hostile job, then an ordinary one on the same backend, which must come out as usual."""
    result = box.run(job)
    assert result.backend == box.name
    after = box.run(NEXT)
    assert after.status == "ok", after.message
    assert after.instances[0].metrics == EXPECTED, "the next job's numbers are a fresh process's"
    return result


def on_process(box: Sandbox) -> bool:
    return isinstance(box, ProcessSandbox)


def test_fork_bomb_stops_at_the_process_limit(box: Sandbox) -> None:
    if on_process(box) and os.geteuid() == 0:
        pytest.xfail(
            "not run: RLIMIT_NPROC does not bind root and the process backend has no pids cgroup, "
            "so a fork bomb run as root would take the host (Docker's pids limit holds)"
        )
    result = contained(box, hostile("import os\nwhile True:\n    os.fork()\n", processes=32, wall_s=10))
    assert result.status in ("denied", "timeout"), result.message


def test_memory_balloon_is_out_of_memory(box: Sandbox) -> None:
    balloon = "hoard = []\nwhile True:\n    hoard.append(bytearray(10**8))\n"
    result = contained(box, hostile(balloon, memory_mb=768))
    assert result.status == "oom", result.message


def test_infinite_loop_is_killed_at_the_wall_clock_limit(box: Sandbox) -> None:
    result = contained(box, hostile("while True:\n    pass\n", wall_s=3))
    assert result.status == "timeout"
    assert "wall-clock" in result.message
    assert result.seconds < 3 + 3


def test_long_c_level_computation_is_killed_at_the_wall_clock_limit(box: Sandbox) -> None:
    result = contained(box, hostile("sum(range(10**13))\n", wall_s=3))
    assert result.status == "timeout"
    assert result.seconds < 3 + 3


def test_busy_loop_is_ended_by_the_cpu_limit(box: Sandbox) -> None:
    result = contained(box, hostile("while True:\n    pass\n", cpu_s=1, wall_s=60))
    assert result.status == "timeout"
    assert "CPU" in result.message


def test_no_connection_reaches_the_hosts_loopback(box: Sandbox) -> None:
    if on_process(box) and not box.network_isolated:  # type: ignore[attr-defined]
        pytest.skip("no network namespace can be created here")
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        connect = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        result = contained(box, hostile(connect + "raise SystemError('REACHED THE HOST')\n"))
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing ever knocked
    assert result.status in ("denied", "invalid"), result.message
    assert "REACHED" not in result.message


def test_a_job_reaches_what_it_serves_itself_on_its_own_loopback(box: Sandbox) -> None:
    if on_process(box) and not box.network_isolated:  # type: ignore[attr-defined]
        pytest.skip("no network namespace can be created here")
    own = (
        "import socket\n"
        "server = socket.create_server(('127.0.0.1', 0))\n"
        "socket.create_connection(server.getsockname(), timeout=2).sendall(b'x')\n"
        "assert server.accept()[0].recv(1) == b'x'\n"
        "raise SystemError('SERVED ITSELF')\n"
    )
    result = contained(box, hostile(own))
    assert "SERVED ITSELF" in result.message, "a job may run servers of its own (the fleet's processes)"


def test_no_route_leads_out(box: Sandbox) -> None:
    if on_process(box) and not box.network_isolated:  # type: ignore[attr-defined]
        pytest.skip("no network namespace can be created here")
    connect = "import socket\nsocket.create_connection(('192.0.2.1', 80), timeout=2)\n"  # TEST-NET-1
    result = contained(box, hostile(connect + "raise SystemError('CONNECTED')\n"))
    assert result.status == "denied", result.message
    assert "unreachable" in result.message


def test_nothing_is_written_outside_the_scratch_dir(
    box: Sandbox, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if on_process(box):
        request.applymarker(pytest.mark.xfail(reason=NO_FILES, strict=True))
    target = tmp_path / "escaped" / "note.txt"
    source = f"import os\nos.makedirs({str(target.parent)!r})\nopen({str(target)!r}, 'w').write('x')\n"
    result = contained(box, hostile(source))
    assert not target.exists()
    assert result.status == "denied", result.message


def test_the_hosts_environment_is_not_passed_in(box: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRUCIBLE_TEST_SECRET", "hunter2")
    source = "import os\nraise RuntimeError(f\"secret={os.environ.get('CRUCIBLE_TEST_SECRET')}\")\n"
    result = contained(box, hostile(source))
    assert result.message == "RuntimeError: secret=None"


def test_no_other_process_environment_can_be_read(box: Sandbox, request: pytest.FixtureRequest) -> None:
    """Run as root, a job holds no capability, so it reads no other process's /proc/PID/environ."""
    if on_process(box) and os.geteuid() != 0:
        request.applymarker(
            pytest.mark.xfail(
                reason=f"{NO_FILES}: /proc/<pid>/environ of its processes is readable", strict=True
            )
        )
    secret = f"hunter2-{uuid.uuid4().hex}"
    source = (
        "import glob\n"
        "def has(path):\n"
        "    try:\n"
        "        with open(path, 'rb') as f:\n"
        f"            return {secret.encode()!r} in f.read()\n"
        "    except OSError:\n"
        "        return False\n"
        "raise RuntimeError(f\"found in {sum(map(has, glob.glob('/proc/[0-9]*/environ')))} processes\")\n"
    )
    env = {**os.environ, "CRUCIBLE_TEST_SECRET": secret}
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], env=env) as holder:
        try:
            result = contained(box, hostile(source))
        finally:
            holder.kill()
    assert secret not in result.message
    assert result.message == "RuntimeError: found in 0 processes"


def test_a_shell_it_starts_dies_with_the_job(box: Sandbox) -> None:
    if on_process(box) and not box.pid_isolated:  # type: ignore[attr-defined]
        pytest.xfail("not run: without a PID namespace a shell in its own session outlives the job")
    marker = f"crucible-hostile-{uuid.uuid4().hex}"
    source = (
        "import subprocess\n"
        f"subprocess.Popen(['/bin/sh', '-c', 'sleep 300; : {marker}'], start_new_session=True)\n"
        "raise SystemError('started a shell')\n"
    )
    try:
        result = contained(box, hostile(source))
        assert result.message == "SystemError: started a shell"
        assert not processes_with(marker)
    finally:
        for pid in processes_with(marker):
            os.kill(pid, signal.SIGKILL)


def test_output_flood_is_capped(box: Sandbox) -> None:
    result = contained(box, hostile("while True:\n    print('x' * 4096)\n", output_kb=64, wall_s=30))
    assert result.status == "crashed"
    assert "output limit exceeded" in result.message
    assert result.seconds < 10


def test_killing_its_parent_harms_nothing_outside(box: Sandbox) -> None:
    if on_process(box) and not box.pid_isolated:  # type: ignore[attr-defined]
        pytest.xfail("not run: without a PID namespace the worker's parent is the search itself")
    source = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nraise SystemError('still here')\n"
    result = contained(box, hostile(source))
    assert result.status in ("invalid", "oom", "crashed"), result.message  # its own group, at worst


def test_worker_that_dies_without_a_result_is_crashed(box: Sandbox) -> None:
    result = contained(box, hostile("import os\nos._exit(3)\n"))
    assert result.status == "crashed"
    assert "exit code 3" in result.message


def processes_with(marker: str) -> list[int]:
    """Host processes whose command line holds the marker (a container's processes are visible here too)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def test_a_job_that_corrupts_what_it_shares_leaves_the_next_one_untouched(
    box: Sandbox, tmp_path: Path
) -> None:
    """Module state, the scratch disk and a lingering child: each gone for the next job on the same worker."""
    marker = f"crucible-hostile-{uuid.uuid4().hex}"
    source = (
        "import os, subprocess, tempfile, targets\n"
        "kv = targets.load('kv')\n"
        "type(kv).evaluate = lambda self, program, instance, params: {'block_hit_rate': 1.0}\n"
        "import targets.kv.target as module\n"
        "module.replay = lambda *a, **k: {}\n"
        "for folder in (os.getcwd(), os.path.dirname(os.getcwd()), tempfile.gettempdir()):\n"
        "    try:\n"
        f"        open(os.path.join(folder, '{marker}'), 'w').write('poison')\n"
        "    except OSError:\n"
        "        pass\n"
        f"subprocess.Popen(['/bin/sh', '-c', 'sleep 30; : {marker}'], start_new_session=True)\n"
        "raise SystemError('corrupted')\n"
    )
    try:
        result = contained(box, hostile(source))
        assert result.message == "SystemError: corrupted"
        for _ in range(3):  # and the next after that: a later job meets no poison either
            again = box.run(NEXT)
            assert again.status == "ok" and again.instances[0].metrics == EXPECTED
        if not on_process(box) or box.pid_isolated:  # type: ignore[attr-defined]
            assert not processes_with(marker), "its lingering child ended with it"
    finally:
        for pid in processes_with(marker):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.docker
def test_a_job_that_exhausts_its_containers_pids_leaves_the_next_one_a_working_container(
    docker_box: Sandbox,
) -> None:
    """The container's pids limit holds the job; what it forked is killed, and its zygote serves on."""
    box = docker_box
    exhaust = (
        "import os, time\n"
        "children = 0\n"
        "while True:\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(60)\n"
        "            os._exit(0)\n"
        "        children += 1\n"
        "    except OSError:\n"
        "        raise SystemError(f'no more processes after {children}')\n"
    )
    result = contained(box, hostile(exhaust, processes=24, wall_s=20))
    assert result.message.startswith("SystemError: no more processes after"), result.message
    for _ in range(2):
        assert box.run(NEXT).instances[0].metrics == EXPECTED


def test_a_job_cannot_write_into_its_warm_parent(box: Sandbox) -> None:
    """The zygote that forks every job is not dumpable, and a job holds no capability even run as root: no
    job may open the zygote's memory."""
    reach = (
        "import os\n"
        "me = os.readlink('/proc/self')  # its pid as /proc numbers it, in whatever PID namespace\n"
        "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "    try:\n"
        "        command = open(f'/proc/{pid}/cmdline', 'rb').read()\n"
        "    except OSError:\n"
        "        continue\n"
        "    if b'sandbox.zygote' in command and pid != me:\n"
        "        try:\n"
        "            open(f'/proc/{pid}/mem', 'r+b').close()\n"
        "        except OSError:\n"
        "            continue\n"
        "        raise SystemError(f'OPENED {pid}')\n"
        "raise SystemError('none opened')\n"
    )
    result = contained(box, hostile(reach))
    assert result.message == "SystemError: none opened", result.message
