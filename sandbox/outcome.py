"""Reading what a worker left behind, the same way for every backend: its result line and its last words."""

from __future__ import annotations

import json
from typing import get_args

from .job import Result, Status
from .worker import MESSAGE_CHARS

STDERR_TAIL = 8192
"""Bytes of the worker's stderr kept for messages; the rest only counts against the output limit."""
OOM_MARKERS = ("MemoryError", "out of memory", "std::bad_alloc")
"""A last stderr line with one of these means the worker ran out of memory (Python, LLVM, C++)."""


def parse_result(stdout: bytes) -> Result | None:
    """The worker's result: a complete first line of stdout that decodes to a Result, else None."""
    line, newline, _ = stdout.partition(b"\n")
    if not newline:
        return None
    try:
        result = Result.from_json(json.loads(line))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return result if result.status in get_args(Status) else None


def last_line(stderr_tail: bytes) -> str:
    """The last non-empty line the worker wrote to stderr, bounded like every message."""
    lines = stderr_tail.decode("utf-8", "replace").strip().splitlines()
    return lines[-1].strip()[:MESSAGE_CHARS] if lines else ""


def ran_out_of_memory(line: str) -> bool:
    return any(marker in line for marker in OOM_MARKERS)
