"""Confine this process (rlimits, then namespaces), then exec the given command.

The process backend starts the worker through this script instead of a `preexec_fn`, because running
Python between fork and exec is unsafe in a parent with threads (the search runs jobs from a thread pool).
Only the standard library is imported, so it runs under `python -I -S`.

Usage: python -I -S confine.py '<json spec>' COMMAND [ARG ...]
spec: {"rlimits": [[resource, soft, hard], ...], "unshare": flags}
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import sys


def unshare(flags: int) -> None:
    """Move this process into new namespaces (e.g. an empty network namespace); OSError if not permitted."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(flags) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def main(argv: list[str]) -> None:
    spec = json.loads(argv[1])
    for which, soft, hard in spec["rlimits"]:
        resource.setrlimit(which, (soft, hard))
    if spec["unshare"]:
        unshare(spec["unshare"])
    os.execv(argv[2], argv[2:])


if __name__ == "__main__":
    main(sys.argv)
