"""Trace files parsed once per process while they are unchanged: a search evaluates one trace many times."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from .base import WorkloadError

T = TypeVar("T")


def parsed(workload: str, parse: Callable[[str], T]) -> T:
    """`parse(path)` of a trace file, cached under its path, modification time and size."""
    path = Path(workload)
    if path.is_dir():
        raise WorkloadError(f"{workload}: a folder, not a trace file; give one of the files in it")
    if not path.is_file():
        raise WorkloadError(f"{workload}: no such trace file")
    stat = path.stat()
    return _parsed(parse, str(path.resolve()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _parsed(parse: Callable[[str], T], path: str, mtime_ns: int, size: int) -> T:
    return parse(path)
