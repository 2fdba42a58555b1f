"""The Docker backend: a fresh, locked-down container per job, all its trials and instances inside it.

The container has no network, a read-only root, a tmpfs scratch, runs as nobody with every capability
dropped and no new privileges, under memory, CPU, process and file-size limits; the host kills it at the
job's wall-clock limit or output cap and always removes it. The job goes in on stdin and the result comes
back on stdout over one attach connection, read as it arrives, as the process backend reads its pipes.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import stat
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import docker
import requests
from docker.errors import DockerException, NotFound
from docker.types import LogConfig, Mount, Ulimit

import targets

from .base import SandboxUnavailable
from .files import read_files, relocated
from .image import BUILD_COMMAND, LABEL, has_image, image_name
from .job import Job, Limits, Result
from .outcome import STDERR_TAIL, last_line, parse_result, ran_out_of_memory
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
MAX_SPARES = 4
"""Warm containers kept at most for one kind of job, however many jobs run side by side."""


def connect() -> docker.DockerClient:
    """A client of the local Docker engine; SandboxUnavailable says why there is none."""
    try:
        client = docker.from_env(timeout=API_TIMEOUT_S)
        client.ping()
    except (DockerException, requests.RequestException) as exc:
        raise SandboxUnavailable(f"no Docker engine answers ({one_line(exc)})") from None
    return client


@dataclass(frozen=True)
class _Started:
    """A container created, attached and started: its worker is loading, or waiting for a job on stdin."""

    id: str
    key: tuple[Any, ...]
    """The workload mounts and limits it was made with: a spare serves only a job with the same."""
    attached: Any
    """The SDK's wrapper of the attach connection; the connection lives as long as it does."""

    @property
    def conn(self) -> socket.socket:
        return getattr(self.attached, "_sock", self.attached)


@dataclass
class DockerSandbox:
    """One fresh container per job, never pulled: a missing image is an error that says how to build it.

    With `prewarm`, once no job runs, containers for next jobs like the finished ones (same workload
    files, same limits; as many as ran side by side) are started in the background: each worker imports,
    loads the kernels and reads the traces by running a baseline on the same instances, then waits in
    silence for its job on stdin. Each container still runs one candidate and is removed; its start is
    moved off the next job's path, not saved.
    """

    image: str = field(default_factory=image_name)
    client: docker.DockerClient = field(default_factory=connect)
    prewarm: bool = True
    name: ClassVar[str] = "docker"
    owner: str = field(init=False)
    _containers: _Containers = field(init=False, repr=False)

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
        """Remove the spares and finished jobs' containers, and wait; the sandbox runs no job after this."""
        self._containers.close()

    def run(self, job: Job) -> Result:
        """Run the worker on the job in a fresh container and classify how it ended; never raises."""
        start = time.monotonic()
        try:
            result = self._run(job, start + job.limits.wall_s)
        except (DockerException, requests.RequestException, OSError) as exc:
            result = Result("crashed", f"docker: {one_line(exc)}")
        return replace(result, backend=self.name, seconds=time.monotonic() - start)

    def _run(self, job: Job, deadline: float) -> Result:
        sent, mounts = _mapped(job)
        private = [m["Source"] for m in mounts if not os.stat(m["Source"]).st_mode & stat.S_IROTH]
        if private:
            return Result(
                "crashed",
                f"{private[0]}: not readable by other users, and the docker sandbox runs jobs as nobody "
                "(chmod o+r it)",
            )
        containers = self._containers
        limits = job.limits
        inside = (limits.memory_mb, limits.cpu_s, limits.processes, limits.file_size_mb)  # the wall is ours
        key = (tuple((m["Target"], m["Source"]) for m in mounts), inside)
        started = containers.acquire(key, mounts, job.limits, deadline)
        try:
            try:
                watch = _watch(started.conn, json.dumps(sent.to_json()).encode(), deadline, job.limits)
            finally:  # hang up now: an engine still writing to us would hold up the kill and the removal
                _hang_up(started)
            result = parse_result(watch.stdout)
            if result is None:
                api = self.client.api
                if watch.killed_for:
                    with contextlib.suppress(DockerException):
                        api.kill(started.id)
                code = int(api.wait(started.id, timeout=EXIT_WAIT_S)["StatusCode"])
                oom = bool(api.inspect_container(started.id)["State"]["OOMKilled"])
                result = _classify(watch, code, oom, job.limits)
        finally:
            containers.finished(started, (sent, mounts) if self.prewarm else None)
        return replace(result, message=_host_paths(result.message, mounts))


@dataclass
class _Containers:
    """Starts, keeps and removes one sandbox's containers; background work holds this, never the sandbox."""

    api: docker.APIClient
    image: str
    owner: str
    spares: list[_Started] = field(default_factory=list)
    starting: dict[tuple[Any, ...], int] = field(default_factory=dict)
    """Spares being started, by key: a job waits for one of those rather than start a container too."""
    running: dict[tuple[Any, ...], int] = field(default_factory=dict)
    """Jobs in their containers now, by key."""
    ended: list[str] = field(default_factory=list)
    """Containers of finished jobs, removed once no job runs."""
    next_jobs: dict[tuple[Any, ...], tuple[Job, list[Mount]]] = field(default_factory=dict)
    """A finished job of each key, to warm spares for once no job runs."""
    peak: dict[tuple[Any, ...], int] = field(default_factory=dict)
    """The most jobs of a key run side by side so far: how many spares to keep for it."""
    changed: threading.Condition = field(default_factory=threading.Condition)
    background: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(
            max_workers=MAX_SPARES, thread_name_prefix="crucible-docker"
        )
    )

    def acquire(self, key: tuple[Any, ...], mounts: list[Mount], limits: Limits, deadline: float) -> _Started:
        """A container for a job: a waiting spare, or one started now; counted as running until finished."""
        with self.changed:
            self.running[key] = self.running.get(key, 0) + 1
            self.peak[key] = max(self.peak.get(key, 0), self.running[key])
        try:
            return self.take(key, deadline) or self.start(key, mounts, limits)
        except BaseException:
            with self.changed:
                self.running[key] -= 1
            raise

    def finished(self, started: _Started, spare_for: tuple[Job, list[Mount]] | None) -> None:
        """The job is over. Once no job runs, spares for jobs like it start and its container goes.

        Not before: the engine's work to start and remove containers takes CPU that running jobs miss
        (a search's batch waits for its slowest job), and the search's own work between batches leaves
        room for it.
        """
        with self.changed:
            self.running[started.key] -= 1
            self.ended.append(started.id)
            if spare_for:
                self.next_jobs[started.key] = spare_for
            if any(self.running.values()):
                return
            ended, self.ended = self.ended, []
            next_jobs, self.next_jobs = self.next_jobs, {}
        for key, (sent, mounts) in next_jobs.items():
            self.request_spare(key, sent, mounts)
        for container in ended:
            self.later(self.remove, container)

    def start(
        self, key: tuple[Any, ...], mounts: list[Mount], limits: Limits, warm: Job | None = None
    ) -> _Started:
        """Create, attach and start a container; with `warm`, its worker runs that job before reading one."""
        command = ["python", "-m", "sandbox.worker"]
        if warm is not None:
            command += ["--warm", json.dumps(warm.to_json())]
        container = self.api.create_container(
            self.image,
            command=command,
            user=USER,
            working_dir=SCRATCH,
            environment=_environment(),
            labels={LABEL: self.image, OWNER_LABEL: self.owner},
            stdin_open=True,  # and, not detached, closed once the job is sent (StdinOnce)
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

    def request_spare(self, key: tuple[Any, ...], sent: Job, mounts: list[Mount]) -> None:
        """Have containers for next jobs like `sent` started in the background, as many as are missing.

        Enough is one per job of this key that ran side by side at the peak (the search's `workers`), so
        a batch of jobs finds as many warm containers. A spare warms up by running the target's first
        baseline on all the job's instances, so nothing the job touches is first loaded on its path (one
        warmed on the first instance only measured +8 to +15 % of a typical job; README, The sandbox).
        """
        try:
            baseline = next(iter(targets.load(sent.target).baselines().values()), None)
        except (KeyError, ImportError):
            return  # a job for no known target: the worker has said so; nothing to warm for
        warm = Job(sent.target, baseline, sent.instances, limits=sent.limits) if baseline else None
        with self.changed:
            wanted = min(self.peak.get(key, 1), MAX_SPARES)
            missing = wanted - sum(spare.key == key for spare in self.spares) - self.starting.get(key, 0)
            self.starting[key] = self.starting.get(key, 0) + max(missing, 0)
        for _ in range(missing):
            self.later(self._start_spare, key, mounts, sent.limits, warm)

    def _start_spare(
        self, key: tuple[Any, ...], mounts: list[Mount], limits: Limits, warm: Job | None
    ) -> None:
        spare = None
        try:
            spare = self.start(key, mounts, limits, warm)
        except (DockerException, requests.RequestException, OSError):
            pass  # the next job starts its own container
        finally:
            with self.changed:
                self.starting[key] -= 1
                if spare is not None:
                    self.spares.append(spare)
                self.changed.notify_all()

    def take(self, key: tuple[Any, ...], deadline: float) -> _Started | None:
        """A spare for this key that still waits in silence (one being started is waited for)."""
        with self.changed:
            self.changed.wait_for(
                lambda: not self.starting.get(key) or any(s.key == key for s in self.spares),
                timeout=max(deadline - time.monotonic(), 0.0),
            )
            stale = [spare for spare in self.spares if spare.key != key]
            fitting = [spare for spare in self.spares if spare.key == key]
            self.spares[:] = fitting[1:]
        for spare in stale:
            self.discard(spare)
        if fitting and _waiting(fitting[0].conn):
            return fitting[0]
        if fitting:
            self.discard(fitting[0])
        return None

    def discard(self, started: _Started) -> None:
        _hang_up(started)
        self.later(self.remove, started.id)

    def remove(self, container: str) -> None:
        with contextlib.suppress(DockerException, requests.RequestException):
            self.api.remove_container(container, force=True)

    def later(self, task: Callable[..., None], *args: Any) -> None:
        """Run a task in the background, or now once closed."""
        try:
            self.background.submit(task, *args)
        except RuntimeError:
            task(*args)

    def close(self) -> None:
        self.background.shutdown(wait=True)  # pending removals, and spares still being started
        with self.changed:
            left, ended = list(self.spares), list(self.ended)
            self.spares.clear()
            self.ended.clear()
        for spare in left:
            _hang_up(spare)
            self.remove(spare.id)
        for container in ended:
            self.remove(container)


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
    """Whether a spare still waits for its job: a worker that said anything, or ended, is not used."""
    conn.setblocking(False)
    try:
        conn.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


def _hang_up(started: _Started) -> None:
    """Close the attach connection (again is harmless): the engine stops writing, the worker's stdin ends."""
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
        "init": True,  # docker-init as pid 1: the worker gets SIGXCPU normally, orphans are reaped
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
        "ulimits": [
            Ulimit(name="cpu", soft=limits.cpu_s, hard=limits.cpu_s + 1),
            Ulimit(name="fsize", soft=limits.file_size_mb * mb, hard=limits.file_size_mb * mb),
            Ulimit(name="core", soft=0, hard=0),
        ],
        "log_config": LogConfig(type="none"),  # the output is read live; nothing piles up on the host's disk
    }


def _mapped(job: Job) -> tuple[Job, list[Mount]]:
    """The job as the container sees it: each file its target reads bound read-only below WORKLOADS, and
    every value naming one rewritten to where it is mounted. Nothing else of the host is visible."""
    inside = {path: f"{WORKLOADS}/{n}/{path.name}" for n, path in enumerate(read_files(job))}
    mounts = [Mount(there, str(path), type="bind", read_only=True) for path, there in inside.items()]
    return relocated(job, inside), mounts


def _host_paths(message: str, mounts: list[Mount]) -> str:
    """A message from inside names the user's files as the user knows them, not where they were mounted."""
    for mount in mounts:
        message = message.replace(mount["Target"], mount["Source"])
    return message


@dataclass(frozen=True)
class _Watch:
    """What came back over the attach connection, and why we killed the container, if we did."""

    stdout: bytes
    stderr_tail: bytes
    killed_for: str
    """"wall" or "output" when we stopped reading to kill the container; empty otherwise."""


def _watch(conn: socket.socket, payload: bytes, deadline: float, limits: Limits) -> _Watch:
    """Send the job, then read the multiplexed output until a result line, its end, the deadline or the cap.

    A complete first line on stdout is the result, which wins whatever follows: the container need not be
    waited for.
    """
    cap = limits.output_kb * 1024
    streams = {STDOUT: bytearray(), STDERR: bytearray()}
    pending = bytearray()
    total = 0
    try:
        conn.settimeout(max(deadline - time.monotonic(), 0.001))
        conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)  # end of stdin: the worker reads the whole job, then runs it
    except TimeoutError:
        return _Watch(b"", b"", "wall")
    conn.setblocking(False)
    with selectors.DefaultSelector() as selector:
        selector.register(conn, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return _Watch(bytes(streams[STDOUT]), bytes(streams[STDERR]), "wall")
            if not selector.select(min(left, POLL_S)):
                continue
            try:
                chunk = conn.recv(65536)
            except BlockingIOError:
                continue
            if not chunk:
                return _Watch(bytes(streams[STDOUT]), bytes(streams[STDERR]), "")
            pending += chunk
            while len(pending) >= FRAME_HEADER:
                size = int.from_bytes(pending[4:FRAME_HEADER], "big")
                if len(pending) < FRAME_HEADER + size:
                    break
                kind = pending[0]
                streams.setdefault(kind, bytearray()).extend(pending[FRAME_HEADER : FRAME_HEADER + size])
                del pending[: FRAME_HEADER + size]
                del streams[STDERR][:-STDERR_TAIL]
                total += size
            if total > cap:
                return _Watch(bytes(streams[STDOUT]), bytes(streams[STDERR]), "output")
            if b"\n" in streams[STDOUT]:
                return _Watch(bytes(streams[STDOUT]), bytes(streams[STDERR]), "")


def _classify(watch: _Watch, code: int, oom: bool, limits: Limits) -> Result:
    """With no result line, the process backend's rules: our kills first, then the kernel's, then stderr."""
    if watch.killed_for == "wall":
        return Result("timeout", f"wall-clock limit of {limits.wall_s:g} s exceeded")
    if watch.killed_for == "output":
        return Result("crashed", f"output limit exceeded ({limits.output_kb} KB)")
    if oom:
        return Result("oom", f"out of memory: the container reached its {limits.memory_mb} MB limit")
    if code == 128 + signal.SIGXCPU:
        return Result("timeout", f"CPU limit of {limits.cpu_s} s exceeded")
    last = last_line(watch.stderr_tail)
    if ran_out_of_memory(last):
        return Result("oom", last)
    signum = code - 128
    killed = signum in signal.valid_signals()
    ending = f"killed by signal {signum}: {signal.strsignal(signum)}" if killed else f"exit code {code}"
    return Result("crashed", f"worker ended without a result ({ending}){': ' + last if last else ''}")
