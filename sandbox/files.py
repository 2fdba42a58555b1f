"""The files a job reads, as its target declares them, and the job rewritten to read them somewhere else.

A job runs away from the caller: the process backend in a scratch folder, the Docker backend in a
container that sees only what is mounted. So every value of a job that names a file the target reads (the
workload, a profile given in the config) is rewritten before the job is sent: to its absolute path, or to
where the container mounts it. Relative paths are taken against the caller's working directory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import targets
from targets.base import Instance

from .job import Job


def read_files(job: Job) -> tuple[Path, ...]:
    """Every existing file the job's instances read, absolute, each once, in the order first named.

    A file the target names that does not exist is left out: the worker then reports it as the user typed
    it. A job for an unknown target reads nothing here; the worker says the target is unknown.
    """
    try:
        target = targets.load(job.target)
    except KeyError:
        return ()
    found: dict[Path, None] = {}
    for instance in job.instances:
        for name in target.files(instance):
            path = Path(name).resolve()
            if path.is_file():
                found.setdefault(path)
    return tuple(found)


@dataclass
class KnownFiles:
    """read_files of each distinct target and instances (and working directory, which relative paths are
    taken against), found once: a search sends the same instances with every job, and finding their files
    loads the target (its entry point read afresh) and resolves paths."""

    most: int = 64
    found: dict[str, tuple[Path, ...]] = field(default_factory=dict)

    def of(self, job: Job) -> tuple[Path, ...]:
        key = json.dumps([os.getcwd(), job.target, [i.to_json() for i in job.instances]], sort_keys=True)
        if key not in self.found:
            if len(self.found) >= self.most:
                self.found.clear()
            self.found[key] = read_files(job)
        return self.found[key]


def relocated(job: Job, where: Mapping[Path, str]) -> Job:
    """The job with each value that names a file of `where` (the workload, a top-level config entry)
    replaced by where that file is to be read."""

    def moved(value: Any) -> Any:
        if not isinstance(value, str) or not value:
            return value
        return where.get(Path(value).resolve(), value)

    def instance(i: Instance) -> Instance:
        return replace(i, workload=moved(i.workload), config={k: moved(v) for k, v in i.config.items()})

    return replace(job, instances=tuple(instance(i) for i in job.instances))


def absolute(job: Job, files: tuple[Path, ...]) -> Job:
    """The job with every file it reads (`files`, as read_files finds them) named by its absolute path, as
    a job run in another folder needs."""
    return relocated(job, {path: str(path) for path in files})
