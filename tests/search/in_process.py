"""A sandbox that runs each job with the real worker in the calling process: real evaluations without a
child process per job, so search tests stay fast; it pickles, so process pools can run it too."""

from __future__ import annotations

from dataclasses import dataclass

from sandbox.job import Job, Result
from sandbox.worker import run


@dataclass(frozen=True)
class InProcess:
    name: str = "in-process"

    def run(self, job: Job) -> Result:
        return run(job)
