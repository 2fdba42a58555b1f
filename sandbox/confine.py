"""Confine this process (rlimits, then namespaces), then exec the given command.

The process backend starts the worker through this script instead of a `preexec_fn`, because running
Python between fork and exec is unsafe in a parent with threads (the search runs jobs from a thread pool).
Only the standard library is imported, so it runs under `python -I -S`.

With a new PID namespace among the flags, the command runs as a forked child, pid 1 of that namespace,
and this process waits and ends as it ended: when the command ends, the kernel kills everything it left
behind, and nothing in it can signal a process outside (the search, by pid), whatever session it starts.

Usage: python -I -S confine.py '<json spec>' COMMAND [ARG ...]
spec: {"rlimits": [[resource, soft, hard], ...], "unshare": flags}
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import sys

CLONE_NEWPID = 0x20000000
PR_SET_PDEATHSIG = 1


def unshare(flags: int) -> None:
    """Move this process into new namespaces (e.g. an empty network namespace); OSError if not permitted."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(flags) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def run_as_init(command: list[str]) -> None:
    """Fork the command into the new PID namespace as its pid 1, wait, and end the way it ended."""
    child = os.fork()
    if child == 0:
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # if this process is killed, so is it
        os.execv(command[0], command)
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        if signum != signal.SIGKILL:  # whose handler cannot be set, nor needs to be
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)  # only if that signal could not end this process
    os._exit(os.WEXITSTATUS(status))


def main(argv: list[str]) -> None:
    spec = json.loads(argv[1])
    for which, soft, hard in spec["rlimits"]:
        resource.setrlimit(which, (soft, hard))
    if spec["unshare"]:
        unshare(spec["unshare"])
    if spec["unshare"] & CLONE_NEWPID:
        run_as_init(argv[2:])
    os.execv(argv[2], argv[2:])


if __name__ == "__main__":
    main(sys.argv)
