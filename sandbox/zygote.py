"""A warm parent that forks a fresh, confined child for every job: the sandbox at in-process speed.

A zygote is started once per worker slot (by the process backend as a child of the search, by the Docker
backend as the command of a container) with a scrubbed environment and no secret in it. It imports the
worker, numba, the targets and Optuna once, and warms itself on a trusted job (the target's first packaged
baseline on the coming job's instances: kernels compiled, traces parsed) before the first job of each kind.
It never runs candidate code itself. For each job it forks a child that, before anything of the job is
read, starts a session of its own, drops to the job's limits (rlimits), clears its environment, enters a
private scratch folder and, where permitted, new network and PID namespaces (in the latter as pid 1 of a
grandchild); then it runs the job with the worker and writes the result. The zygote watches the child as the
old per-job process was watched (wall-clock limit, output cap, how it ended), answers with the Result as
soon as it is complete, then kills whatever is left of the job and removes its scratch folder.

Where the zygote is the only inhabitant of a container that outlives its jobs (the Docker backend), the
request says `sweep`: after each job it kills every process the job left, even in another session, and
ends itself (the container is then replaced) if the job changed anything of the scratch disk outside its own
folder, numba's cache there included, so no job can leave anything for the next.

Protocol: one JSON request per line on stdin, one JSON answer per line on stdout, in order; the zygote ends
at end of stdin (its caller went away, even killed), killing the job it watches.
Request: {"job": Job, "env": {..}, "rlimits": [[resource, soft, hard], ..], "unshare": flags,
"sweep": bool}. Answer: a Result.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import gc
import json
import os
import resource
import selectors
import shutil
import signal
import sys
import tempfile
import termios
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import targets
from targets.base import Target

from .confine import confine, die_with_parent, undumpable
from .job import Job, Limits, Result
from .outcome import STDERR_TAIL, last_line, parse_result, ran_out_of_memory

POLL_S = 0.05
"""How often the watch looks whether the child exited while its pipes are still open."""


@dataclass(frozen=True)
class Watched:
    """What the zygote saw of one child: its output, how it ended, and why it was killed, if it was."""

    stdout: bytes
    stderr_tail: bytes
    returncode: int | None
    """None when its result came complete: it is killed then, and reaped after the answer."""
    cpu_s: float
    killed_for: str
    """"wall" or "output" when the zygote killed it; empty otherwise."""


@dataclass(frozen=True)
class Forked:
    """A job's child, killed, left to reap once the zygote has answered, and its scratch folder, removed
    again then (against anything the child made while it was being killed)."""

    pid: int
    scratch: Path
    reaped: bool

    def clear(self) -> None:
        """Kill what is left of the job, reap the child, remove its folder."""
        if not self.reaped:
            _kill_job(self.pid)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
        shutil.rmtree(self.scratch, ignore_errors=True)


def main() -> None:
    """Serve jobs until end of stdin. Candidate code never runs in this process."""
    undumpable()  # no job, though run by the same user, may open this process's memory and outlive itself
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the search's to handle; it ends us by EOF
    scratch_root = Path(os.environ.get("CRUCIBLE_SCRATCH_ROOT") or tempfile.gettempdir())
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # anything printed while warming lands on stderr, never among the answers
    from . import worker  # imported once here: every child has it

    worker.seed_numba_cache()
    warm = Warm(worker)
    gc.freeze()  # what the zygote holds is never collected in a child: those pages stay shared, not copied
    requests = os.fdopen(0, "rb", buffering=0)
    pending = bytearray()
    while True:
        line = _read_line(requests, pending)
        if line is None:
            return
        request = json.loads(line)
        job = Job.from_json(request["job"])
        warm.up(job)
        sweep = bool(request.get("sweep"))
        before = _disk(scratch_root) if sweep else {}
        result, forked = supervise(request, warm.target(job.target), scratch_root)
        answers.write(json.dumps(result.to_json()) + "\n")
        answers.flush()
        if forked is not None:  # after the answer: the caller need not wait for the child's teardown
            forked.clear()
        if sweep:
            _kill_strays()
            _reap()
            if _disk(scratch_root) != before:
                return  # the job left something on the disk the next would share: a fresh container


def _disk(root: Path) -> dict[str, tuple[int, int]]:
    """Every file below the scratch root, with its size and modification time (a job's own folder is gone
    by the time this is compared)."""
    found = {}
    for path in root.rglob("*"):
        with contextlib.suppress(OSError):
            stat = path.lstat()
            found[str(path)] = (stat.st_size, stat.st_mtime_ns)
    return found


def _kill_strays() -> None:
    """Kill every process but this one and its ancestors (none where it is a container's pid 1): what a job
    left behind."""
    keep = {os.getpid()}
    pid = os.getppid()
    while pid > 0 and pid not in keep:
        keep.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    for entry in Path("/proc").glob("[0-9]*"):
        if int(entry.name) not in keep:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)


def _reap() -> None:
    """Reap every ended child: as a container's pid 1 the zygote inherits what a job's processes forked."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _read_line(stream: Any, pending: bytearray) -> bytes | None:
    """The next line of the requests, or None at their end."""
    while b"\n" not in pending:
        chunk = stream.read(65536)
        if not chunk:
            return None
        pending += chunk
    line, _, rest = bytes(pending).partition(b"\n")
    pending[:] = rest
    return line


@dataclass
class Warm:
    """What the zygote has loaded and warmed, which every child it forks then has: each target, loaded once,
    and each kind of job (target and instances), run once as a trusted job (kernels compiled, traces
    parsed, Optuna's lazy parts imported)."""

    worker: Any
    targets: dict[str, Target | None] = field(default_factory=dict)
    kinds: set[str] = field(default_factory=set)

    def target(self, name: str) -> Target | None:
        """The target, loaded once; None where it does not load (the child then says why)."""
        if name not in self.targets:
            try:
                self.targets[name] = targets.load(name)
            except (KeyError, ImportError):
                self.targets[name] = None
        return self.targets[name]

    def up(self, job: Job) -> None:
        """Run a trusted job like this one, once per kind."""
        kind = json.dumps([job.target, [i.to_json() for i in job.instances]], sort_keys=True)
        if kind in self.kinds:
            return
        self.kinds.add(kind)
        target = self.target(job.target)
        trusted = warming(job, target) if target is not None else None
        if trusted is not None:
            with _one_warming_at_a_time():
                self.worker.run(trusted, target)
            self.worker.warm_tuner()
            gc.freeze()


@contextlib.contextmanager
def _one_warming_at_a_time() -> Iterator[None]:
    """Hold a lock in the temp folder while warming: with numba's cache cold, the first zygote compiles the
    kernels and the others wait and load them, instead of every zygote compiling them at once."""
    try:
        fd = os.open(Path(tempfile.gettempdir()) / "crucible-warming.lock", os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError:
        yield  # no lock to be had here: warm all the same
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def warming(job: Job, target: Target) -> Job | None:
    """The trusted job a zygote warms up on for jobs like this one: the target's first packaged baseline on
    the same instances and limits (never candidate code); None where the target has none."""
    baseline = next(iter(target.baselines().values()), None)
    if baseline is None:
        return None
    return Job(job.target, baseline, job.instances, limits=job.limits)


def supervise(
    request: dict[str, Any], target: Target | None, scratch_root: Path
) -> tuple[Result, Forked | None]:
    """Fork a confined child for the job, watch it until its result or its end, and classify how it ended;
    the child, killed by then, is left to clear."""
    job = Job.from_json(request["job"])
    limits = job.limits
    start = time.monotonic()
    try:
        scratch = Path(tempfile.mkdtemp(prefix="crucible-job-", dir=scratch_root))
    except OSError as exc:
        return Result("crashed", f"cannot create a scratch folder: {exc}"), None
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = 0
    try:
        pid = os.fork()
        if pid == 0:  # the child: confined before anything of the job is read, then the job
            _child(request, target, scratch, out_w, err_w)
        os.close(out_w)
        os.close(err_w)
        watched = _watch(pid, out_r, err_r, start + limits.wall_s, limits.output_kb * 1024)
    finally:
        for fd in (out_r, err_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(scratch, ignore_errors=True)  # the child is killed by now; cleared again once reaped
    result = replace(classify(watched, limits), seconds=time.monotonic() - start)
    return result, Forked(pid, scratch, reaped=watched.returncode is not None)


def _child(request: dict[str, Any], target: Target | None, scratch: Path, out_w: int, err_w: int) -> None:
    """In the forked child: never returns."""
    try:
        os.setsid()  # its own group: the zygote kills it whole, and no signal of the terminal reaches it
        die_with_parent()
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, _max_fd())  # the zygote's pipes (its requests and answers) are not the job's
        os.chdir(scratch)
        os.environ.clear()
        os.environ.update({**request["env"], "HOME": str(scratch), "TMPDIR": str(scratch)})
        tempfile.tempdir = None  # read TMPDIR again
        from numba.core import config as numba_config  # imported by the warm-up: its cache is the zygote's

        numba_config.CACHE_DIR = str(scratch / "numba")  # what a job compiles is cached in its own folder
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        confine(request["rlimits"], int(request["unshare"]))
        from .worker import serve_one

        serve_one(Job.from_json(request["job"]), target)
        os._exit(0)
    except BaseException:  # nothing of the zygote's may run on in a child: any failure ends it here
        with contextlib.suppress(Exception):
            import traceback

            traceback.print_exc()
        os._exit(70)


def _max_fd() -> int:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft if soft != resource.RLIM_INFINITY else 65536


def _watch(pid: int, out_fd: int, err_fd: int, deadline: float, output_cap: int) -> Watched:
    """Read both pipes as they fill until the child exits; kill its group at the deadline or output cap, or
    when the zygote's own caller goes away (stdin ends: the zygote then ends too, its child with it)."""
    buffers = {out_fd: bytearray(), err_fd: bytearray()}
    total, killed_for, exited, orphaned = 0, "", False, False
    with selectors.DefaultSelector() as selector:
        for fd in buffers:
            selector.register(fd, selectors.EVENT_READ)
        selector.register(0, selectors.EVENT_READ)  # the caller sends nothing while a job runs: only its end
        while not killed_for and (_open(selector, buffers) or not exited):
            left = deadline - time.monotonic()
            if left <= 0:
                killed_for = "wall"
                break
            events = selector.select(min(left, POLL_S))
            for key, _ in events:
                if key.fd == 0:
                    orphaned = _ended(0)
                    if not orphaned:
                        selector.unregister(0)  # a caller that writes early: read it later, not now
                    continue
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
            if orphaned:
                break
            if b"\n" in buffers[out_fd] and parse_result(bytes(buffers[out_fd])) is not None:
                _kill_job(pid)  # its answer is complete: the rest of its exit is not waited for
                return Watched(bytes(buffers[out_fd]), bytes(buffers[err_fd]), None, 0.0, "")
            if not exited and _exited(pid):
                exited = True
                _kill_job(pid)  # whatever it left behind in its group may still hold the pipes
            if not _open(selector, buffers) and not exited and 0 not in selector.get_map():
                time.sleep(POLL_S / 10)  # pipes closed, the child still running, nothing else to wait on
    _kill_job(pid)  # before reaping, so the group id cannot have been reused
    _, status, usage = os.wait4(pid, 0)
    if orphaned:
        os._exit(0)
    return Watched(
        stdout=bytes(buffers[out_fd]),
        stderr_tail=bytes(buffers[err_fd]),
        returncode=os.waitstatus_to_exitcode(status),
        cpu_s=usage.ru_utime + usage.ru_stime,
        killed_for=killed_for,
    )


def _open(selector: selectors.BaseSelector, pipes: dict[int, bytearray]) -> bool:
    """Whether a pipe of the child's is still open."""
    return any(fd in selector.get_map() for fd in pipes)


def _ended(fd: int) -> bool:
    """Whether a readable fd is at its end (nothing to read), rather than holding data."""
    waiting = ctypes.c_int(0)
    try:
        fcntl.ioctl(fd, termios.FIONREAD, waiting)
    except OSError:
        return True
    return waiting.value == 0


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


def classify(watch: Watched, limits: Limits) -> Result:
    """A complete result line wins; else the limit the zygote or the kernel enforced; else stderr's last
    line."""
    result = parse_result(watch.stdout)
    if result is not None:
        return result
    if watch.killed_for == "wall":
        return Result("timeout", f"wall-clock limit of {limits.wall_s:g} s exceeded")
    if watch.killed_for == "output":
        return Result("crashed", f"output limit exceeded ({limits.output_kb} KB)")
    code = watch.returncode if watch.returncode is not None else 0
    if code == -signal.SIGXCPU or (code == -signal.SIGKILL and watch.cpu_s >= limits.cpu_s):
        return Result("timeout", f"CPU limit of {limits.cpu_s} s exceeded")
    if code == -signal.SIGKILL:
        return Result("oom", "killed by SIGKILL outside the sandbox's limits (likely out of memory)")
    last = last_line(watch.stderr_tail)
    if ran_out_of_memory(last):
        return Result("oom", last)
    ending = f"killed by signal {-code}: {signal.strsignal(-code)}" if code < 0 else f"exit code {code}"
    return Result("crashed", f"worker ended without a result ({ending}){': ' + last if last else ''}")


if __name__ == "__main__":
    main()
    sys.exit(0)
