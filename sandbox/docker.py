"""The Docker backend: locked-down containers, each a warm zygote (zygote.py) that forks a fresh child per
job, all the job's trials and instances inside that child.

A container has no network, a read-only root, a tmpfs scratch, runs as nobody with every capability
dropped and no new privileges, under memory, process and file-size limits; its zygote gives each job's
child the job's CPU and file-size limits, kills it at the wall-clock limit or output cap, kills whatever it
left behind, and ends itself if the job changed the scratch disk outside its own folder. A container serves
the jobs of one worker slot that read the same files under the same limits, one after another, and is
replaced when its zygote ends (a job broke it) and removed with the sandbox, or by the engine when the
search goes away (its stdin closes, the zygote ends, the container is removed). Requests go in on stdin and
results come back on stdout over one attach connection per container, read as they arrive.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import selectors
import socket
import stat
import threading
import time
import uuid
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import docker
import requests
from docker.errors import DockerException, NotFound
from docker.types import LogConfig, Mount, Ulimit

from .base import SandboxUnavailable
from .files import KnownFiles, relocated
from .image import BUILD_COMMAND, LABEL, has_image, image_name
from .job import Job, Limits, Result
from .outcome import STDERR_TAIL, last_line, parse_result
from .process import THREAD_VARIABLES
from .worker import one_line

USER = "65534:65534"
"""nobody:nogroup, present in every Debian root."""
SCRATCH = "/scratch"
"""The job's home, working and temp directory: the only writable place, a tmpfs."""
SCRATCH_SPARE_MB = 64
"""Scratch room beyond the file-size limit: numba's cache of the image's kernels is copied there."""
WORKLOADS = "/workloads"
"""Workload files are bound read-only below here; the job sent in names them by these paths."""
CPUS = 1.0
"""One job is one core, as the single-threaded worker assumes."""
OWNER_LABEL = "org.crucible.owner"
"""Who started a container (host, pid, start time, sandbox); the reaper removes those whose process died."""
API_TIMEOUT_S = 60
EXIT_WAIT_S = 30
"""How long to wait for a container to report its exit once its output has closed or it was killed."""
POLL_S = 0.1
FRAME_HEADER = 8
"""Docker multiplexes stdout and stderr on one connection: [stream, 0, 0, 0, size (4 bytes, big-endian)]."""
STDOUT, STDERR = 1, 2
MAX_IDLE = 8
"""Containers kept waiting at most; more are removed as their jobs finish."""
WARM_ALLOWANCE_S = 900.0
"""How long a container's zygote may take to warm up before a job's own wall-clock limit starts."""


def connect() -> docker.DockerClient:
    """A client of the local Docker engine; SandboxUnavailable says why there is none."""
    try:
        client = docker.from_env(timeout=API_TIMEOUT_S)
        client.ping()
    except (DockerException, requests.RequestException) as exc:
        raise SandboxUnavailable(f"no Docker engine answers ({one_line(exc)})") from None
    return client


@dataclass
class DockerSandbox:
    """Warm containers, one per job in flight, never pulled: a missing image is an error that says how to
    build it. Each container's zygote forks a fresh child per job; no candidate ever runs in the zygote."""

    image: str = field(default_factory=image_name)
    client: docker.DockerClient = field(default_factory=connect)
    name: ClassVar[str] = "docker"
    owner: str = field(init=False)
    _containers: _Containers = field(init=False, repr=False)
    _files: KnownFiles = field(default_factory=KnownFiles, init=False, repr=False)

    def __post_init__(self) -> None:
        if not has_image(self.client, self.image):
            raise SandboxUnavailable(
                f"no sandbox image {self.image} for this source (the tag follows the code and its pinned "
                f"dependencies); build it with: {BUILD_COMMAND}"
            )
        self.owner = _owner(os.getpid())
        reap(self.client)
        self._containers = _Containers(self.client.api, self.image, self.owner)
        weakref.finalize(self, self._containers.close)

    def close(self) -> None:
        """Remove the containers; the sandbox runs no job after this."""
        self._containers.close()

    def run(self, job: Job) -> Result:
        """Run the job in a child of a warm container's zygote and classify how it ended; never raises."""
        start = time.monotonic()
        try:
            result = self._run(job, start + job.limits.wall_s + WARM_ALLOWANCE_S)
        except (DockerException, requests.RequestException, OSError) as exc:
            result = Result("crashed", f"docker: {one_line(exc)}")
        return replace(result, backend=self.name, seconds=time.monotonic() - start)

    def _run(self, job: Job, deadline: float) -> Result:
        sent, mounts = _mapped(job, self._files.of(job))
        private = [m["Source"] for m in mounts if not os.stat(m["Source"]).st_mode & stat.S_IROTH]
        if private:
            return Result(
                "crashed",
                f"{private[0]}: not readable by other users, and the docker sandbox runs jobs as nobody "
                "(chmod o+r it)",
            )
        limits = job.limits
        inside = (limits.memory_mb, limits.processes, limits.file_size_mb)  # the CPU and wall are per job
        key = (tuple((m["Target"], m["Source"]) for m in mounts), inside)
        request = json.dumps(_request(sent)).encode() + b"\n"
        for fresh in (False, True):  # a kept container whose zygote has just ended gives way to a new one
            started = self._containers.acquire(key, mounts, limits, fresh)
            watch = _watch(started.conn, request, deadline)
            result = parse_result(watch.stdout)
            if result is not None:
                self._containers.release(started)
                return replace(result, message=_host_paths(result.message, mounts))
            self._containers.discard(started)
            if watch.answered or started.served == 0:
                break
        if watch.killed_for == "wall":
            return Result("timeout", f"the container did not answer within {WARM_ALLOWANCE_S:g} s of warm-up")
        last = last_line(watch.stderr_tail)
        said = f": {last}" if last else ""
        return Result("crashed", f"the container's zygote ended without an answer{said}")


def _request(job: Job) -> dict[str, Any]:
    """What a container's zygote is asked to run: the job, the child's environment and limits; no
    namespaces (the container is them), and a sweep after the job."""
    mb = 1024 * 1024
    limits = job.limits
    rlimits = [
        [resource.RLIMIT_CPU, limits.cpu_s, limits.cpu_s + 1],  # SIGXCPU first, SIGKILL a second later
        [resource.RLIMIT_FSIZE, limits.file_size_mb * mb, limits.file_size_mb * mb],
        [resource.RLIMIT_CORE, 0, 0],
    ]
    return {
        "job": job.to_json(),
        "env": _environment(),
        "rlimits": rlimits,
        "unshare": 0,
        "sweep": True,
    }


@dataclass
class _Started:
    """A container created, attached and started: its zygote waits for requests on stdin."""

    id: str
    key: tuple[Any, ...]
    """The workload mounts and limits it was made with: it serves only jobs with the same."""
    attached: Any
    """The SDK's wrapper of the attach connection; the connection lives as long as it does."""
    served: int = 0
    """Jobs it has answered."""

    @property
    def conn(self) -> socket.socket:
        return getattr(self.attached, "_sock", self.attached)


@dataclass
class _Containers:
    """Starts, keeps and removes one sandbox's containers."""

    api: docker.APIClient
    image: str
    owner: str
    idle: list[_Started] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False

    def acquire(self, key: tuple[Any, ...], mounts: list[Mount], limits: Limits, fresh: bool) -> _Started:
        """A waiting container for this key whose zygote still waits, or one started now."""
        found = None
        if not fresh:
            with self.lock:
                for i, started in enumerate(self.idle):
                    if started.key == key:
                        found = self.idle.pop(i)
                        break
        if found is not None and _waiting(found.conn):
            return found
        if found is not None:
            self.discard(found)
        return self.start(key, mounts, limits)

    def release(self, started: _Started) -> None:
        """A job is done: keep the container for the next job like it, or remove it when enough wait."""
        started.served += 1
        with self.lock:
            keep = not self.closed and len(self.idle) < MAX_IDLE
            if keep:
                self.idle.append(started)
        if not keep:
            self.discard(started)

    def start(self, key: tuple[Any, ...], mounts: list[Mount], limits: Limits) -> _Started:
        """Create, attach and start a container whose zygote reads requests from the attach connection."""
        container = self.api.create_container(
            self.image,
            command=["python", "-m", "sandbox.zygote"],
            user=USER,
            working_dir=SCRATCH,
            environment={**_environment(), "CRUCIBLE_SCRATCH_ROOT": SCRATCH},
            labels={LABEL: self.image, OWNER_LABEL: self.owner},
            stdin_open=True,  # closed when our attach connection goes (StdinOnce): the zygote then ends
            use_config_proxy=False,  # the host's proxy settings stay out of the container's environment
            host_config=self.api.create_host_config(**_host_config(limits, mounts)),
        )["Id"]
        try:
            streams = dict.fromkeys(("stdin", "stdout", "stderr", "stream"), 1)
            attached = self.api.attach_socket(container, params=streams)
            self.api.start(container)
        except BaseException:
            self.remove(container)
            raise
        return _Started(container, key, attached)

    def discard(self, started: _Started) -> None:
        _hang_up(started)
        self.remove(started.id)

    def remove(self, container: str) -> None:
        with contextlib.suppress(DockerException, requests.RequestException):
            self.api.remove_container(container, force=True)

    def close(self) -> None:
        with self.lock:
            self.closed = True
            idle, self.idle = self.idle, []
        for started in idle:
            self.discard(started)


def reap(client: docker.DockerClient) -> int:
    """Remove this backend's containers whose owning process is gone (a search killed mid-job leaves them)."""
    removed = 0
    for container in client.containers.list(all=True, sparse=True, filters={"label": LABEL}):
        if not _alive(container.attrs.get("Labels", {}).get(OWNER_LABEL, "")):
            with contextlib.suppress(NotFound):
                container.remove(force=True)
                removed += 1
    return removed


def _owner(pid: int) -> str:
    """host:pid:start-time:sandbox, unique to one sandbox object of one process."""
    return f"{socket.gethostname()}:{pid}:{_started(pid)}:{uuid.uuid4().hex[:8]}"


def _alive(owner: str) -> bool:
    """Whether the process that labelled a container still runs; another host's containers are left alone."""
    host, pid, started, *_ = [*owner.split(":"), "", "", ""]
    if host != socket.gethostname():
        return True
    return pid.isdigit() and _started(int(pid)) == started


def _started(pid: int) -> str:
    """When a process started (clock ticks since boot), so a reused pid is not mistaken for the owner."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return ""
    return fields[19]


def _waiting(conn: socket.socket) -> bool:
    """Whether a kept container's zygote still waits: one that spoke unasked, or ended, is not used."""
    conn.setblocking(False)
    try:
        conn.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


def _hang_up(started: _Started) -> None:
    """Close the attach connection (again is harmless): the engine stops writing, the zygote's stdin ends."""
    conn = started.conn
    if conn is None:
        return
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)
    started.attached.close()
    conn.close()


def _environment() -> dict[str, str]:
    return {
        "HOME": SCRATCH,
        "TMPDIR": SCRATCH,
        "NUMBA_CACHE_DIR": f"{SCRATCH}/numba",
        "LANG": "C.UTF-8",
        **dict.fromkeys(THREAD_VARIABLES, "1"),
    }


def _host_config(limits: Limits, mounts: list[Mount]) -> dict[str, Any]:
    mb = 1024 * 1024
    uid, gid = USER.split(":")
    scratch_mb = limits.file_size_mb + SCRATCH_SPARE_MB
    return {
        "init": False,  # the zygote, not dumpable, is pid 1: nothing in the container a job could open
        "network_mode": "none",
        "read_only": True,
        "tmpfs": {SCRATCH: f"rw,nosuid,nodev,noexec,size={scratch_mb}m,uid={uid},gid={gid},mode=0700"},
        "mounts": mounts,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "mem_limit": limits.memory_mb * mb,
        "memswap_limit": limits.memory_mb * mb,
        "nano_cpus": int(CPUS * 1e9),
        "pids_limit": limits.processes,
        "ulimits": [  # the job's CPU limit is its child's alone: the zygote's own time adds up across jobs
            Ulimit(name="fsize", soft=limits.file_size_mb * mb, hard=limits.file_size_mb * mb),
            Ulimit(name="core", soft=0, hard=0),
        ],
        "auto_remove": True,  # a container whose zygote ended (its caller gone, or a job broke it) goes
        "log_config": LogConfig(type="none"),  # the output is read live; nothing piles up on the host's disk
    }


def _mapped(job: Job, files: tuple[Path, ...]) -> tuple[Job, list[Mount]]:
    """The job as the container sees it: each file its target reads bound read-only below WORKLOADS, and
    every value naming one rewritten to where it is mounted. Nothing else of the host is visible."""
    inside = {path: f"{WORKLOADS}/{n}/{path.name}" for n, path in enumerate(files)}
    mounts = [Mount(there, str(path), type="bind", read_only=True) for path, there in inside.items()]
    return relocated(job, inside), mounts


def _host_paths(message: str, mounts: list[Mount]) -> str:
    """A message from inside names the user's files as the user knows them, not where they were mounted."""
    for mount in mounts:
        message = message.replace(mount["Target"], mount["Source"])
    return message


@dataclass(frozen=True)
class _Watch:
    """What came back over the attach connection for one request, and why we stopped reading, if we did."""

    stdout: bytes
    stderr_tail: bytes
    killed_for: str
    """"wall" when no answer came in time; empty otherwise."""
    answered: bool
    """Whether anything of an answer came (a zygote that says nothing was gone before it was asked)."""


def _watch(conn: socket.socket, payload: bytes, deadline: float) -> _Watch:
    """Send one request, then read the multiplexed output until the answer's line, the end of the
    connection or the deadline (the zygote enforces the job's own limits)."""
    streams = {STDOUT: bytearray(), STDERR: bytearray()}
    pending = bytearray()
    try:
        conn.setblocking(True)
        conn.settimeout(max(deadline - time.monotonic(), 0.001))
        conn.sendall(payload)
    except TimeoutError:
        return _Watch(b"", b"", "wall", False)
    except OSError:
        return _Watch(b"", b"", "", False)
    conn.setblocking(False)
    with selectors.DefaultSelector() as selector:
        selector.register(conn, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return _Watch(bytes(streams[STDOUT]), bytes(streams[STDERR]), "wall", bool(streams[STDOUT]))
            if not selector.select(min(left, POLL_S)):
                continue
            try:
                chunk = conn.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                return _Watch(bytes(streams[STDOUT]), bytes(streams[STDERR]), "", bool(streams[STDOUT]))
            pending += chunk
            while len(pending) >= FRAME_HEADER:
                size = int.from_bytes(pending[4:FRAME_HEADER], "big")
                if len(pending) < FRAME_HEADER + size:
                    break
                kind = pending[0]
                streams.setdefault(kind, bytearray()).extend(pending[FRAME_HEADER : FRAME_HEADER + size])
                del pending[: FRAME_HEADER + size]
                del streams[STDERR][:-STDERR_TAIL]
            if b"\n" in streams[STDOUT]:
                return _Watch(bytes(streams[STDOUT]), bytes(streams[STDERR]), "", True)
