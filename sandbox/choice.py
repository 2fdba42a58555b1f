"""Pick the sandbox backend a user asked for, and say which one runs and why."""

from __future__ import annotations

from .base import Sandbox
from .process import ProcessSandbox

BACKENDS = ("auto", "process")


def choose_sandbox(name: str) -> tuple[Sandbox, str]:
    """The backend for `name` and a short reason that the CLI prints on stderr."""
    if name == "process":
        return ProcessSandbox(), "asked for"
    if name == "auto":
        return ProcessSandbox(), "the only backend in this build"
    raise ValueError(f"unknown sandbox backend {name!r}; choose one of {', '.join(BACKENDS)}")
