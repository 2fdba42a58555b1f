"""Candidates per minute of a search on a Dask cluster of 1, 2 and 4 workers against the same search in
process; the time per job the Dask executor adds; the steady-state loop against the batch loop.

Run from the repository root: `python bench/throughput.py [--budget N] [--trials N] [--clusters 1 2 4]
[--quick] [--record]` (`--quick`: 2 candidates of 1 trial, a cluster of 1 worker, no warm-up).

Every figure is a real search (kv, the `gen:chat:1` workload at capacity 300, the evolve proposer, seed 0)
run to its budget into a fresh store, timed from `execute` to the end (baselines included):
- in-process: a 1-thread local pool running `sandbox.worker.run` in this process (no isolation, no
  transport), after a one-candidate warm-up search: the baseline of the cluster rows;
- dask N: a `LocalCluster` of N worker processes (one `sandbox` slot each) on 127.0.0.1 and `--workers N`
  jobs in flight; each job runs the same worker code inside the Dask worker process. The cluster starts
  before the clock does.
- executor overhead: a job that does nothing, submitted and waited for one at a time, through a thread
  pool and through the Dask executor (median seconds per job).
- steady vs batch: the local pool with 4 jobs in flight, each job held for an extra 0.1-1.6 s drawn from
  a hash of its source (jobs of differing length, as LLM-written candidates and gated ones are), under
  each schedule of search/loop/schedule.py.
The machine's load average before and after says how much other work shared it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import _bench
import cloudpickle
from distributed import LocalCluster

from sandbox.job import Job, Result
from sandbox.worker import run
from search.executors.cluster import RESOURCE, connect
from search.proposers.evolve.proposer import EvolveProposer
from search.service.runs import RunService, prepare
from search.store.store import Store, open_engine

if __name__ != "__main__":  # imported: the workers cannot import bench/ (a script is sent by value)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


@dataclass(frozen=True)
class InProcess:
    """The worker's own evaluation, wherever the job lands (this process or a Dask worker's)."""

    name: str = "in-process"

    def run(self, job: Job) -> Result:
        return replace(run(job), backend=self.name)


@dataclass(frozen=True)
class Uneven:
    """The in-process evaluation, held 0.1-1.6 s longer by a hash of the candidate's source."""

    name: str = "uneven"

    def run(self, job: Job) -> Result:
        digest = hashlib.sha256(job.source.encode()).digest()
        time.sleep(0.1 + 1.5 * digest[0] / 255)
        return run(job)


def nothing() -> None:
    """The job that measures the executor alone."""


def search(
    folder: Path, name: str, executor: Executor, sandbox: object, workers: int, **settings: object
) -> float:
    """Candidates per minute of one search run to its budget."""
    runs = RunService(Store(open_engine(f"sqlite:///{folder / name}.db")))
    config = prepare("kv", "gen:chat:1", {"capacity": 300}, workers=workers, seed=0, **settings)
    run_id = runs.record(config).run_id
    start = time.monotonic()
    runs.execute(run_id, sandbox, EvolveProposer(), executor=executor)  # type: ignore[arg-type]
    seconds = time.monotonic() - start
    done = runs.read.run(run_id).done
    return 60.0 * done / seconds


def overhead(executor: Executor, jobs: int = 30) -> float:
    """Median seconds to submit a job that does nothing and get its result back."""
    times = []
    for _ in range(jobs):
        start = time.monotonic()
        executor.submit(nothing).result()
        times.append(time.monotonic() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=12, help="candidates per search")
    parser.add_argument("--trials", type=int, default=4, help="Optuna trials per candidate")
    parser.add_argument("--clusters", type=int, nargs="+", default=[1, 2, 4], help="Dask workers of each")
    args, session = _bench.start(parser)
    if session.quick:
        args.budget, args.trials, args.clusters = 2, 1, [1]
    settings = {"budget": args.budget, "trials": args.trials}
    load = os.getloadavg()[0]
    folder = Path(tempfile.mkdtemp(prefix="crucible-throughput-"))
    with ThreadPoolExecutor(max_workers=1) as pool:
        if not session.quick:  # imports, kernels, the trace (a quick run's rates are not figures to keep)
            search(folder, "warm-up", pool, InProcess(), 1, budget=1, trials=1)
        alone = search(folder, "in-process", pool, InProcess(), 1, **settings)
        thread_overhead = overhead(pool)
    print(f"{'executor':<14}{'cand/min':>10}{'x in-process':>14}")
    print(f"{'in-process':<14}{alone:>10.1f}{1.0:>14.2f}")
    rows = [{"executor": "in-process", "candidates/min": alone, "x in-process": 1.0}]
    dask_overhead = 0.0
    for workers in args.clusters:
        cluster = LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            resources={RESOURCE: 1},
        )
        with cluster, connect(cluster.scheduler_address) as executor:
            rate = search(folder, f"dask-{workers}", executor, InProcess(), workers, **settings)
            if workers == args.clusters[0]:
                dask_overhead = overhead(executor)
        print(f"{f'dask {workers}':<14}{rate:>10.1f}{rate / alone:>14.2f}")
        rows.append({"executor": f"dask {workers}", "candidates/min": rate, "x in-process": rate / alone})
    print(
        f"executor overhead per job: thread pool {thread_overhead * 1e3:.2f} ms, "
        f"dask {dask_overhead * 1e3:.2f} ms ({dask_overhead / thread_overhead:.0f}x)"
    )
    rates = {}
    for schedule in ("batch", "steady"):
        with ThreadPoolExecutor(max_workers=4) as pool:
            rates[schedule] = search(folder, schedule, pool, Uneven(), 4, schedule=schedule, **settings)
    print(
        f"jobs of differing length, 4 in flight: steady {rates['steady']:.1f} cand/min, "
        f"batch {rates['batch']:.1f} cand/min: steady/batch {rates['steady'] / rates['batch']:.2f}"
    )
    print(f"load average before {load:.1f}, after {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
    session.save(
        {
            "searches": rows,
            "executor overhead per job": [
                {"thread pool ms": thread_overhead * 1e3, "dask ms": dask_overhead * 1e3}
            ],
            "jobs of differing length, 4 in flight": [
                {"schedule": name, "candidates/min": rate} for name, rate in rates.items()
            ],
        }
    )


if __name__ == "__main__":
    main()
