"""The Dask executor: each candidate job is a task on a Dask worker, run in that host's own sandbox.

The scheduler only places tasks; the sandbox on the worker enforces the job's limits (wall clock, memory,
processes) and kills it, because cancelling a Dask future does not stop a task that is running. A task
holds one `sandbox` resource of its worker, so a host runs at most as many jobs as its worker declares
(`dask worker ... --resources sandbox=N`). A task whose worker dies is run again on another worker (up to
Dask's `distributed.scheduler.allowed-failures`, 3 by default); a task that raises is retried `retries`
times. The loop records each job once, from the one result its future gives.
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any

from sandbox.base import Sandbox
from sandbox.choice import choose_sandbox
from sandbox.job import Job, Result
from search.errors import UserError

RESOURCE = "sandbox"
"""The worker resource one job holds."""
RETRIES = 2
"""Runs of a job that raised, after the first (a sandbox returns bad code's failures; it does not raise)."""
CONNECT_S = 10
"""How long to try reaching the scheduler before giving up."""


@dataclass(frozen=True)
class HostSandbox:
    """The sandbox of the host a job lands on, chosen there (Docker where that host runs it, else the
    process backend): what travels to a worker is the backend's name, not the client's sandbox."""

    backend: str = "auto"
    name: str = "each worker's"

    def run(self, job: Job) -> Result:
        return _sandbox_here(self.backend).run(job)


@functools.cache
def _sandbox_here(backend: str) -> Sandbox:
    """One choice per worker process: probing Docker for every job would cost a connection each time."""
    return choose_sandbox(backend)[0]


class DaskExecutor(Executor):
    """`concurrent.futures` over a Dask client: what the loop submits becomes a task holding one sandbox
    resource, with bounded retries; shutting down cancels what is left and closes the client."""

    def __init__(self, client: Any, retries: int = RETRIES) -> None:
        self.client = client
        self._tasks = client.get_executor(resources={RESOURCE: 1}, retries=retries, pure=False)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        return self._tasks.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if cancel_futures:
            self.client.cancel(list(self._tasks._futures))
        self._tasks.shutdown(wait=wait and not cancel_futures)
        self.client.close()


def connect(address: str, timeout_s: float = CONNECT_S) -> DaskExecutor:
    """An executor on the scheduler at `address` (tcp://HOST:PORT); UserError in one line when it cannot
    be reached or no worker offers the sandbox resource, before anything is stored."""
    from distributed import Client  # the distributed package loads only for a cluster run

    try:
        _reachable(address, timeout_s)
        client = Client(address, timeout=f"{timeout_s}s", set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise UserError(f"cannot reach the Dask scheduler at {address}: {reason}") from None
    workers = client.scheduler_info().get("workers", {})
    if not any(w.get("resources", {}).get(RESOURCE) for w in workers.values()):
        client.close()
        raise UserError(
            f"no worker of the Dask scheduler at {address} offers the {RESOURCE} resource; "
            f"start workers with: dask worker {address} --resources {RESOURCE}=1"
        )
    return DaskExecutor(client)


def _reachable(address: str, timeout_s: float) -> None:
    """Raise OSError at once where nothing listens at the address (ValueError for one that is not
    tcp://HOST:PORT): Dask's client would retry until its timeout, then fail noisily when collected."""
    from distributed.comm.addressing import parse_address, parse_host_port

    scheme, location = parse_address(address)
    if scheme != "tcp":
        raise ValueError(f"expected tcp://HOST:PORT, got the scheme {scheme!r}")
    host, port = parse_host_port(location)
    socket.create_connection((host, port), timeout=timeout_s).close()
