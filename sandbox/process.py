"""The process backend, where no Docker engine runs: warm zygotes (zygote.py) that fork a confined child per
job (rlimits, a scrubbed environment, a private scratch folder, new network and PID namespaces where this
machine permits them), one zygote per job in flight, kept between jobs."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import resource
import selectors
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, ClassVar

from .files import KnownFiles, absolute
from .job import Job, Limits, Result
from .outcome import STDERR_TAIL, last_line, parse_result

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CONFINE_SCRIPT = Path(__file__).resolve().with_name("confine.py")
CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
NAMESPACE_FLAGS = (
    CLONE_NEWNET | CLONE_NEWPID,
    CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID,
    CLONE_NEWNET,
    CLONE_NEWUSER | CLONE_NEWNET,
)
"""Tried in order: network and PID namespaces as root, else in a new user namespace; else network alone."""
WARM_ALLOWANCE_S = 900.0
"""How long a zygote may take to warm up (import, compile the kernels cold, parse the traces) before a job's
own wall-clock limit starts; it enforces that limit itself."""
IDLE_ZYGOTES = 8
"""Zygotes kept waiting at most; more are ended as their jobs finish."""
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")
"""One job is one core: thread pools would fight RLIMIT_NPROC and reserve address space per thread."""


@dataclass
class ProcessSandbox:
    """Jobs in children of warm zygotes: rlimits, scrubbed environment, private scratch, no network where
    permitted. It pickles (a cluster's workers get their own zygotes)."""

    name: ClassVar[str] = "process"

    def __post_init__(self) -> None:
        self._zygotes = _Zygotes(self._environment())
        self._files = KnownFiles()
        weakref.finalize(self, self._zygotes.close)

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__post_init__()

    def close(self) -> None:
        """End the waiting zygotes (each ends its job, if one runs)."""
        self._zygotes.close()

    @functools.cached_property
    def namespace_flags(self) -> int:
        """The unshare flags that work here (0 where none is permitted), probed once with a trivial child."""
        for flags in NAMESPACE_FLAGS:
            try:
                subprocess.run(
                    _confined({"rlimits": [], "unshare": flags}, [sys.executable, "-c", ""]),
                    check=True,
                    env={},
                    timeout=30,
                    stderr=subprocess.DEVNULL,
                )
            except (OSError, subprocess.SubprocessError):
                continue
            return flags
        return 0

    @property
    def network_isolated(self) -> bool:
        """Whether jobs run in a network namespace of their own, loopback only (else the host's network)."""
        return self.namespace_flags != 0

    @property
    def pid_isolated(self) -> bool:
        """Whether jobs run in a new PID namespace: they cannot signal the search, and end whole."""
        return bool(self.namespace_flags & CLONE_NEWPID)

    def run(self, job: Job) -> Result:
        """Run the job in a child of a warm zygote and classify how it ended; never raises."""
        start = time.monotonic()
        sent = absolute(job, self._files.of(job))  # the child runs in its scratch folder, away from here
        request = {
            "job": sent.to_json(),
            "env": self._environment(),
            "rlimits": _rlimits(job.limits),
            "unshare": self.namespace_flags,
        }
        result = self._zygotes.serve(request, job.limits.wall_s + WARM_ALLOWANCE_S)
        return replace(result, backend=self.name, seconds=time.monotonic() - start)

    def _environment(self) -> dict[str, str]:
        """What a zygote and its children see of the environment: of the user's, only PYTHONPATH and
        numba's cache setting (so the zygotes load the kernels the search compiled, and the reverse)."""
        cache = {k: v for k, v in os.environ.items() if k == "NUMBA_CACHE_DIR"}
        return {
            "PATH": os.defpath,
            # the user's PYTHONPATH after ours: a target a package there declares must load in the child too
            "PYTHONPATH": os.pathsep.join(filter(None, (str(PROJECT_ROOT), os.environ.get("PYTHONPATH")))),
            **cache,
            "LANG": "C.UTF-8",
            **dict.fromkeys(THREAD_VARIABLES, "1"),
        }


@dataclass
class _Zygote:
    """One zygote process and the pipes to it; its stderr goes to a file read when it dies."""

    process: subprocess.Popen[bytes]
    log: IO[bytes]

    def ask(self, request: dict[str, Any], timeout_s: float) -> Result | None:
        """The answer to one request, or None if the zygote died or did not answer in time."""
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(json.dumps(request).encode() + b"\n")
            self.process.stdin.flush()
        except OSError:
            return None
        fd = self.process.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            if not selector.select(timeout_s):
                return None
        line = self.process.stdout.readline()
        return parse_result(line) if line else None

    def why_gone(self) -> str:
        """The last line the zygote said before it ended, or that it did not answer."""
        self.log.seek(0)
        last = last_line(self.log.read()[-STDERR_TAIL:])
        return last or "it did not answer"

    def end(self) -> None:
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()  # end of its requests: it ends its job and itself
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


@dataclass
class _Zygotes:
    """The warm zygotes of one sandbox: one per job in flight, started when none waits, kept when done."""

    env: dict[str, str]
    idle: list[_Zygote] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False

    def serve(self, request: dict[str, Any], timeout_s: float) -> Result:
        with self.lock:
            zygote = self.idle.pop() if self.idle else None
        if zygote is None or zygote.process.poll() is not None:
            try:
                zygote = self._start()
            except OSError as exc:
                return Result("crashed", f"cannot start the sandbox's zygote: {exc}")
        answer = zygote.ask(request, timeout_s)
        if answer is None:
            why = zygote.why_gone()
            zygote.end()
            return Result("crashed", f"the sandbox's zygote ended without an answer: {why}")
        with self.lock:
            keep = not self.closed and len(self.idle) < IDLE_ZYGOTES
            if keep:
                self.idle.append(zygote)
        if not keep:
            zygote.end()
        return answer

    def _start(self) -> _Zygote:
        log = tempfile.TemporaryFile()  # noqa: SIM115 (kept open while the zygote lives)
        process = subprocess.Popen(
            [sys.executable, "-m", "sandbox.zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=tempfile.gettempdir(),
            env={**self.env, "CRUCIBLE_SCRATCH_ROOT": tempfile.gettempdir()},
            start_new_session=True,  # no signal of the terminal's reaches it: it ends when its stdin does
        )
        return _Zygote(process, log)

    def close(self) -> None:
        with self.lock:
            self.closed = True
            idle, self.idle = self.idle, []
        for zygote in idle:
            zygote.end()


def _rlimits(limits: Limits) -> list[list[int]]:
    """The job's rlimits, capped at the inherited hard limits."""
    mb = 1024 * 1024
    wanted = {
        resource.RLIMIT_AS: (limits.memory_mb * mb,) * 2,
        resource.RLIMIT_CPU: (limits.cpu_s, limits.cpu_s + 1),  # SIGXCPU first, SIGKILL a second later
        resource.RLIMIT_NPROC: (limits.processes,) * 2,
        resource.RLIMIT_FSIZE: (limits.file_size_mb * mb,) * 2,
        resource.RLIMIT_CORE: (0, 0),
    }
    return [[which, *_within(which, soft, hard)] for which, (soft, hard) in wanted.items()]


def _confined(spec: dict[str, Any], command: list[str]) -> list[str]:
    """The command line that confines itself with confine.py before it execs `command`."""
    return [sys.executable, "-I", "-S", str(CONFINE_SCRIPT), json.dumps(spec), *command]


def _within(which: int, soft: int, hard: int) -> tuple[int, int]:
    """Limits no looser than the inherited hard limit, which an unprivileged process cannot raise."""
    inherited = resource.getrlimit(which)[1]
    if inherited == resource.RLIM_INFINITY:
        return soft, hard
    return min(soft, inherited), min(hard, inherited)
