"""Pick the sandbox backend a user asked for, say which one runs and why, and survey what works here."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import targets

from .base import BACKENDS, Sandbox, SandboxUnavailable
from .docker import DockerSandbox, connect
from .job import Job
from .process import ProcessSandbox

__all__ = ["BACKENDS", "choose_sandbox", "notice", "survey"]


def choose_sandbox(name: str) -> tuple[Sandbox, str]:
    """The backend for `name` and a few words of why, for the one line a front end prints on stderr.

    auto takes Docker when the engine answers and the image for this source exists, else the process
    backend, and says so in a few words: a user who never asked for Docker reads one short line, and
    `--sandbox docker` gives the whole reason (asking for docker where it cannot run is an error that says
    how to make it run).
    """
    if name == "process":
        return ProcessSandbox(), "asked for"
    if name == "docker":
        return DockerSandbox(), "asked for"
    if name == "auto":
        try:
            client = connect()
        except SandboxUnavailable:
            return ProcessSandbox(), "no Docker engine; --sandbox docker to require it"
        try:
            docker = DockerSandbox(client=client)
        except SandboxUnavailable:
            return ProcessSandbox(), "no image for this source: crucible sandbox build makes it"
        return docker, "auto"
    raise ValueError(f"unknown sandbox backend {name!r}; choose one of {', '.join(BACKENDS)}")


def notice(sandbox: Sandbox, reason: str) -> str:
    """The line a front end prints on stderr before it runs anything: plain text, short enough not to wrap."""
    return f"sandbox: {sandbox.name} ({reason})"


@dataclass(frozen=True)
class Availability:
    """Whether a backend ran a baseline job here, and what it isolates or why it cannot run."""

    backend: str
    works: bool
    detail: str


def survey() -> tuple[Availability, ...]:
    """Try every backend on a small real job: the answer to `crucible sandbox check`."""
    job = _smoke_job()
    found = []
    for name in ("docker", "process"):
        try:
            box, _ = choose_sandbox(name)
        except SandboxUnavailable as exc:
            found.append(Availability(name, False, str(exc)))
            continue
        start = time.monotonic()
        result = box.run(job)
        if result.status != "ok":
            found.append(Availability(name, False, f"a baseline job ended {result.status}: {result.message}"))
            continue
        found.append(
            Availability(
                name, True, f"{_isolation(box)}; a baseline job took {time.monotonic() - start:.1f} s"
            )
        )
    return tuple(found)


def _smoke_job() -> Job:
    """The first baseline of the first target on its shipped workload, scored once."""
    target = targets.load(targets.names()[0])
    config = target.default_config()
    instances = tuple(i for i in target.instances(config.pop("workload"), config) if i.role == "eval")
    return Job(target.name, next(iter(target.baselines().values())), instances)


def _isolation(box: Sandbox) -> str:
    if isinstance(box, DockerSandbox):
        return f"image {box.image}: no network, read-only root, nobody, no capabilities, cgroup limits"
    assert isinstance(box, ProcessSandbox)
    network = "own network namespace, its loopback alone" if box.network_isolated else "the host's network"
    pids = "own PID namespace" if box.pid_isolated else "the host's PIDs"
    return f"rlimits, {network}, {pids}, the files and /proc of uid {os.getuid()}"
