"""The process backend: the worker as a child process under rlimits, where no Docker engine runs."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from .base import SandboxUnavailable
from .files import absolute
from .job import Job, Limits, Result
from .outcome import STDERR_TAIL, last_line, parse_result, ran_out_of_memory

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
POLL_S = 0.1
"""How often the watcher looks whether the child exited while its pipes are still open."""
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")
"""One job is one core: thread pools would fight RLIMIT_NPROC and reserve address space per thread."""


def default_cache_dir() -> Path:
    """Numba's cache persists here across jobs, so compiled kernels load instead of recompiling."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "crucible" / "numba"


@dataclass
class ProcessSandbox:
    """A fresh child per job: rlimits, scrubbed environment, private temp dir, no network where permitted."""

    cache_dir: Path = field(default_factory=default_cache_dir)
    name: ClassVar[str] = "process"

    def __post_init__(self) -> None:
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SandboxUnavailable(
                f"cannot create the numba cache {self.cache_dir}: {exc.strerror}; pass another cache_dir"
            ) from None

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
        """Whether jobs run in a new, empty network namespace (else they share the host's network)."""
        return self.namespace_flags != 0

    @property
    def pid_isolated(self) -> bool:
        """Whether jobs run in a new PID namespace: they cannot signal the search, and end whole."""
        return bool(self.namespace_flags & CLONE_NEWPID)

    def run(self, job: Job) -> Result:
        """Run the worker on the job in a child process and classify how it ended; never raises."""
        start = time.monotonic()
        try:
            scratch = Path(tempfile.mkdtemp(prefix="crucible-job-"))
        except OSError as exc:
            return Result("crashed", f"cannot create a temp dir: {exc}", backend=self.name)
        try:  # the job runs in the scratch folder: the files it reads are named by absolute paths
            result = self._run_in(scratch, absolute(job), start + job.limits.wall_s)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return replace(result, backend=self.name, seconds=time.monotonic() - start)

    def _run_in(self, scratch: Path, job: Job, deadline: float) -> Result:
        job_file = scratch / "job.json"
        env = {
            "PATH": os.defpath,
            # the user's PYTHONPATH after ours: a target a package there declares must load in the child too
            "PYTHONPATH": os.pathsep.join(filter(None, (str(PROJECT_ROOT), os.environ.get("PYTHONPATH")))),
            "HOME": str(scratch),
            "TMPDIR": str(scratch),
            "NUMBA_CACHE_DIR": str(self.cache_dir),
            "LANG": "C.UTF-8",
            **dict.fromkeys(THREAD_VARIABLES, "1"),
        }
        limits = job.limits
        try:
            job_file.write_text(json.dumps(job.to_json()), encoding="utf-8")
            with (
                job_file.open("rb") as stdin,
                subprocess.Popen(
                    _confined(
                        _confinement(limits, self.namespace_flags), [sys.executable, "-m", "sandbox.worker"]
                    ),
                    stdin=stdin,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=scratch,
                    env=env,
                    start_new_session=True,
                ) as proc,
            ):
                watch = _watch(proc, deadline, limits.output_kb * 1024)
        except (OSError, subprocess.SubprocessError) as exc:
            return Result("crashed", f"cannot start the worker: {exc}")
        return _classify(watch, limits)


@dataclass(frozen=True)
class _Watch:
    """What the watcher saw of one child: its output, how it ended, and why we killed it, if we did."""

    stdout: bytes
    stderr_tail: bytes
    returncode: int
    cpu_s: float
    killed_for: str
    """"wall" or "output" when we killed the process group; empty otherwise."""


def _confinement(limits: Limits, namespace_flags: int) -> dict[str, Any]:
    """The spec for confine.py: rlimits (capped at the inherited hard limits), then the namespaces if any."""
    mb = 1024 * 1024
    wanted = {
        resource.RLIMIT_AS: (limits.memory_mb * mb,) * 2,
        resource.RLIMIT_CPU: (limits.cpu_s, limits.cpu_s + 1),  # SIGXCPU first, SIGKILL a second later
        resource.RLIMIT_NPROC: (limits.processes,) * 2,
        resource.RLIMIT_FSIZE: (limits.file_size_mb * mb,) * 2,
        resource.RLIMIT_CORE: (0, 0),
    }
    rlimits = [[which, *_within(which, soft, hard)] for which, (soft, hard) in wanted.items()]
    return {"rlimits": rlimits, "unshare": namespace_flags}


def _confined(spec: dict[str, Any], command: list[str]) -> list[str]:
    """The command line that confines itself with confine.py before it execs `command`."""
    return [sys.executable, "-I", "-S", str(CONFINE_SCRIPT), json.dumps(spec), *command]


def _within(which: int, soft: int, hard: int) -> tuple[int, int]:
    """Limits no looser than the inherited hard limit, which an unprivileged process cannot raise."""
    inherited = resource.getrlimit(which)[1]
    if inherited == resource.RLIM_INFINITY:
        return soft, hard
    return min(soft, inherited), min(hard, inherited)


def _watch(proc: subprocess.Popen[bytes], deadline: float, output_cap: int) -> _Watch:
    """Read both pipes as they fill until the child exits; kill its group at the deadline or output cap."""
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    buffers = {out_fd: bytearray(), err_fd: bytearray()}
    total, killed_for, exited = 0, "", False
    with selectors.DefaultSelector() as selector:
        for fd in buffers:
            selector.register(fd, selectors.EVENT_READ)
        while not killed_for and (selector.get_map() or not exited):
            left = deadline - time.monotonic()
            if left <= 0:
                killed_for = "wall"
                break
            if selector.get_map():
                events = selector.select(min(left, POLL_S))
            else:  # both pipes closed: the child is exiting, or hostile and still running
                time.sleep(min(left, POLL_S / 20))
                events = []
            for key, _ in events:
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fd)
                    continue
                total += len(chunk)
                buffers[key.fd] += chunk
                del buffers[err_fd][:-STDERR_TAIL]
                if total > output_cap:
                    killed_for = "output"
                    break
            if not exited and _exited(proc.pid):
                exited = True
                _kill_job(proc.pid)  # whatever it left behind in its group may still hold the pipes
    _kill_job(proc.pid)  # before reaping, so the group id cannot have been reused
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return _Watch(
        stdout=bytes(buffers[out_fd]),
        stderr_tail=bytes(buffers[err_fd]),
        returncode=proc.returncode,
        cpu_s=usage.ru_utime + usage.ru_stime,
        killed_for=killed_for,
    )


def _exited(pid: int) -> bool:
    """Whether the child has exited, without reaping it."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _kill_job(pid: int) -> None:
    """Kill the child's process group and its own children: the namespace's pid 1 may have left the group."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    for child in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(int(child), signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _classify(watch: _Watch, limits: Limits) -> Result:
    """A complete result line wins; else the limit we or the kernel enforced; else the last stderr line."""
    result = parse_result(watch.stdout)
    if result is not None:
        return result
    if watch.killed_for == "wall":
        return Result("timeout", f"wall-clock limit of {limits.wall_s:g} s exceeded")
    if watch.killed_for == "output":
        return Result("crashed", f"output limit exceeded ({limits.output_kb} KB)")
    code = watch.returncode
    if code == -signal.SIGXCPU or (code == -signal.SIGKILL and watch.cpu_s >= limits.cpu_s):
        return Result("timeout", f"CPU limit of {limits.cpu_s} s exceeded")
    if code == -signal.SIGKILL:
        return Result("oom", "killed by SIGKILL outside the sandbox's limits (likely out of memory)")
    last = last_line(watch.stderr_tail)
    if ran_out_of_memory(last):
        return Result("oom", last)
    ending = f"killed by signal {-code}: {signal.strsignal(-code)}" if code < 0 else f"exit code {code}"
    return Result("crashed", f"worker ended without a result ({ending}){': ' + last if last else ''}")
