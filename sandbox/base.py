"""The Sandbox protocol: run a job somewhere isolated and return its result, never raising on bad code."""

from __future__ import annotations

from typing import Protocol

from .job import Job, Result

BACKENDS = ("auto", "docker", "process")
"""What `--sandbox` chooses from: auto prefers Docker where its engine and image are there."""


class SandboxUnavailable(RuntimeError):
    """The backend cannot run here (no Docker daemon, no image); the message says what to do."""


class Sandbox(Protocol):
    name: str

    def run(self, job: Job) -> Result:
        """Run the job to completion or to its limits; hostile code yields a classified Result."""
        ...
