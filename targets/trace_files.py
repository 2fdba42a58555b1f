"""Files a job reads, checked for what they are before anything reads them (a regular file, small enough
to parse in memory), and trace files parsed once per process while they are unchanged: a search evaluates
one trace many times."""

from __future__ import annotations

import functools
import os
import resource
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from .base import WorkloadError

T = TypeVar("T")
PARSE_FACTOR = 8
"""Memory a file takes while it is parsed, in multiples of its size (Python objects per JSON line): a file
larger than the memory this process may hold over this factor is refused before it is read."""


def checked_file(path: Path, what: str = "trace file") -> os.stat_result:
    """The file's status, after checking it is one: a missing path, a folder, a FIFO or a device, or a file
    too large to parse in the memory this process may hold, is a WorkloadError of one line."""
    if path.is_dir():
        raise WorkloadError(f"{path}: a folder, not a {what}; give one of the files in it")
    try:
        found = path.stat()
    except OSError:
        raise WorkloadError(f"{path}: no such {what}") from None
    if not stat.S_ISREG(found.st_mode):
        mode = found.st_mode
        device = stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if device else "a special file"
        raise WorkloadError(f"{path}: {kind}, not a regular {what}")
    room = memory_limit() // PARSE_FACTOR
    if found.st_size > room:
        raise WorkloadError(
            f"{path}: {found.st_size / 2**30:.1f} GiB, more than this process can parse in its memory "
            f"({room / 2**30:.1f} GiB at most for a {what})"
        )
    return found


def memory_limit() -> int:
    """The bytes this process may hold: its address-space limit where one is set, else the memory there is."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return min(soft, physical) if soft != resource.RLIM_INFINITY else physical


def parsed(workload: str, parse: Callable[[str], T]) -> T:
    """`parse(path)` of a trace file, cached under its path, modification time and size."""
    path = Path(workload)
    found = checked_file(path)
    try:
        return _parsed(parse, str(path.resolve()), found.st_mtime_ns, found.st_size)
    except MemoryError:
        raise WorkloadError(f"{workload}: too large to parse in the memory this process may hold") from None


@functools.lru_cache(maxsize=8)
def _parsed(parse: Callable[[str], T], path: str, mtime_ns: int, size: int) -> T:
    return parse(path)
