"""Overhead per candidate job of each sandbox backend, as a ratio to the same evaluation run in-process.

Run from the repository root: `python bench/sandbox_overhead.py [--budget N] [--jobs N] [--gap S]
[--backends process docker] [--quick] [--record]` (`--quick`: 2 candidates, 2 jobs, a 0.1 s gap, the process
backend alone, the `gen:chat:1` workload at 300 blocks, 2 trials per candidate).
The typical job is the search's own: a `crucible search` with its defaults (the shipped kv workload and
capacity, `RunConfig`'s trials, workers and seed, the evolve proposer) is run in-process and every candidate
job it hands its sandbox is recorded as the loop built it (tuning, cascade gate, limits). In-process means
`sandbox.worker.run` in one long-lived, warm Python process per worker (imports done, kernels loaded, the
trace parsed): the evaluation alone, without isolation.

Printed, one run: the same search on each backend (seconds per candidate, everything a search does
included), then the recorded jobs replayed on each backend in three cadences (the median seconds per job of
a batch, and the median of each batch's ratio to the same batch in-process): one at a time back to back;
`workers` side by side back to back (the loop's batches, with no proposer's pause); and `workers` side by
side `--gap` seconds apart (a proposer, such as an LLM, that takes that long per batch), the backends taking
turns batch by batch so that other work on the machine hits all alike; each replayed job's source gets a
fresh comment, so that no backend has compiled it before, as a search's new candidate is new to all. Last,
docker's overhead per typical job in one line. The load average before and after says how much other
work there was.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import _bench

import targets
from sandbox.base import Sandbox, SandboxUnavailable
from sandbox.docker import DockerSandbox
from sandbox.job import Job, Result
from sandbox.process import ProcessSandbox
from sandbox.worker import run
from search.loop.search import Reporter, Search
from search.proposers.evolve.proposer import EvolveProposer
from search.service import open_service
from search.settings import RunConfig

TARGET = "kv"
QUICK_WORKLOAD = "gen:chat:1"
"""A short generated trace: `--quick` times the same jobs on less data."""


@dataclass
class InProcess:
    """Jobs run by `sandbox.worker.run` in warm long-lived processes, one per worker."""

    workers: int
    warm: Job
    name: str = "in-process"

    def __post_init__(self) -> None:
        self.pool = ProcessPoolExecutor(self.workers, initializer=run, initargs=(self.warm,))
        list(self.pool.map(time.sleep, [0.5] * self.workers))  # every process started and warm

    def run(self, job: Job) -> Result:
        return replace(self.pool.submit(run, job).result(), backend=self.name)

    def close(self) -> None:
        self.pool.shutdown()


@dataclass
class Recorder:
    """A sandbox that keeps every job it is handed, as the search built it."""

    box: Sandbox
    jobs: list[Job] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.box.name

    def run(self, job: Job) -> Result:
        self.jobs.append(job)
        return self.box.run(job)


@dataclass
class Clock(Reporter):
    """When the candidates (not the baselines) of a search started and when each ended."""

    start: float = 0.0
    ends: list[float] = field(default_factory=list)

    def started(self, run_id: str, done: int, budget: int) -> None:
        self.start = time.perf_counter()

    def candidate(self, done: int, budget: int, best: float | None, status: str) -> None:
        self.ends.append(time.perf_counter())


def main() -> None:
    args, session = _arguments()
    start_load = os.getloadavg()  # other work on a shared machine moves every figure; say how much there was
    target = targets.load(TARGET)
    target_config = target.default_config()
    workload = target_config.pop("workload")
    if session.quick:
        workload, target_config["capacity"] = QUICK_WORKLOAD, 300
    fewer = {"trials": 2} if session.quick else {}  # else RunConfig's default, the search's own
    config = RunConfig(TARGET, workload, target_config, "evolve", budget=args.budget, **fewer)
    instances = tuple(target.instances(workload, target_config))
    warm = Job(TARGET, next(iter(target.baselines().values())), instances)
    local = InProcess(config.workers, warm)
    backends: dict[str, Sandbox] = {"in-process": local}
    for name, make in (("process", ProcessSandbox), ("docker", DockerSandbox)):
        if name not in args.backends:
            continue
        try:
            backends[name] = make()
        except SandboxUnavailable as exc:
            print(f"{name}: unavailable ({exc})")
    recorder = Recorder(local)
    searches = {name: _search(config, recorder if box is local else box) for name, box in backends.items()}
    jobs = [job for job in recorder.jobs if job.tuning][: args.jobs]
    assert jobs and jobs[0].tuning is not None
    trials = jobs[0].tuning.trials
    print(f"load average (1, 5, 15 min) at the start: {', '.join(f'{x:.2f}' for x in start_load)}")
    print(
        f"typical job: a candidate of `crucible search` with its defaults on {Path(workload).name} at "
        f"capacity {target_config['capacity']}: {trials} Optuna trials on {instances[0].label}, then "
        f"{instances[1].label} unless the cascade gates it; {config.workers} workers, evolve proposer, "
        f"seed {config.seed}\n"
    )
    _table(
        f"the whole search, {config.budget} candidates (s/candidate)",
        {name: {"search": [seconds]} for name, seconds in searches.items()},
    )
    cadences = {
        "1 at a time, back to back": (1, 0.0),
        f"{config.workers} side by side, back to back": (config.workers, 0.0),
        f"{config.workers} side by side, {args.gap:g} s apart": (config.workers, args.gap),
    }
    figures: dict[str, dict[str, list[float]]] = {name: {} for name in backends}
    for cadence, (side_by_side, gap) in cadences.items():
        for name, seconds in _replay(backends, jobs, side_by_side, gap).items():
            figures[name][cadence] = seconds
    print()
    _table(
        f"the search's first {len(jobs)} candidate jobs replayed (s: median s/job of a batch; ratio: median "
        "of each batch's ratio to the same batch in-process)",
        figures,
    )
    data: dict[str, object] = {
        "typical job": f"{trials} Optuna trials on {instances[0].label}; {config.workers} workers",
        "whole search (s/candidate)": [
            {"backend": name, "s/candidate": seconds, "x in-process": seconds / searches["in-process"]}
            for name, seconds in searches.items()
        ],
        "replayed jobs": [
            {
                "backend": name,
                "cadence": cadence,
                "median s/job": statistics.median(seconds),
                "x in-process": _ratio(seconds, figures["in-process"][cadence]),
            }
            for name, row in figures.items()
            for cadence, seconds in row.items()
        ],
    }
    if "docker" in figures:
        docker, base = figures["docker"], figures["in-process"]
        overheads = {cadence: _overhead(docker[cadence], base[cadence]) for cadence in cadences}
        overheads["a whole offline search"] = _overhead([searches["docker"]], [searches["in-process"]])
        said = "; ".join(f"{overhead} {cadence}" for cadence, overhead in overheads.items())
        print(f"\ndocker's overhead per typical job: {said}")
        data["docker overhead"] = [{"cadence": c, "overhead": o} for c, o in overheads.items()]
    print(f"\nload average (1, 5, 15 min) at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for box in backends.values():
        close = getattr(box, "close", None)
        if close:
            close()
    session.save(data)


def _search(config: RunConfig, box: Sandbox) -> float:
    """Seconds per candidate of a fresh search (the baselines it evaluates first are not counted)."""
    with tempfile.TemporaryDirectory() as folder:
        service = open_service(f"sqlite:///{os.path.join(folder, 'bench.db')}")
        journal = service.journal(service.record(config).run_id)
        clock = Clock()
        with ThreadPoolExecutor(max_workers=config.workers) as pool:
            Search(journal, box, EvolveProposer(), clock, executor=pool).execute()
    return (clock.ends[-1] - clock.start) / len(clock.ends)


def _replay(
    backends: dict[str, Sandbox], jobs: Sequence[Job], side_by_side: int, gap: float
) -> dict[str, list[float]]:
    """Seconds per job of each batch of `side_by_side` jobs on each backend, batch by batch.

    With a gap the backends take turns batch by batch, so the load of a shared machine hits all alike;
    back to back each runs all its batches in a row, so each backend's warm parents stay its own.
    """
    per_job: dict[str, list[float]] = {name: [] for name in backends}
    with ThreadPoolExecutor(side_by_side) as pool:
        if gap:
            for box in backends.values():
                box.run(jobs[0])  # the page cache and each backend's warm parent
            for first in range(0, len(jobs), side_by_side):
                for name, box in backends.items():
                    per_job[name].append(
                        _batch(pool, box.run, _unseen(jobs[first : first + side_by_side]), gap)
                    )
        else:
            for name, box in backends.items():
                box.run(jobs[0])
                per_job[name] = [
                    _batch(pool, box.run, _unseen(jobs[first : first + side_by_side]), gap)
                    for first in range(0, len(jobs), side_by_side)
                ]
    return per_job


def _unseen(batch: Sequence[Job]) -> list[Job]:
    """The jobs with a comment no run has had: a warm in-process worker compiles each candidate once and
    keeps it, so a job it ran before would come back free, as no new candidate of a search does."""
    return [replace(job, source=f"{job.source}\n# replayed {uuid.uuid4().hex}") for job in batch]


def _batch(
    pool: ThreadPoolExecutor, execute: Callable[[Job], Result], batch: Sequence[Job], gap: float
) -> float:
    """Seconds per job of one batch run side by side after a pause of `gap` seconds."""
    time.sleep(gap)
    start = time.perf_counter()
    results = list(pool.map(execute, batch))
    seconds = (time.perf_counter() - start) / len(batch)
    failed = [r for r in results if r.status != "ok"]
    if failed:
        raise SystemExit(f"a benchmark job ended {failed[0].status}: {failed[0].message}")
    return seconds


def _table(title: str, figures: dict[str, dict[str, list[float]]]) -> None:
    columns = list(next(iter(figures.values())))
    print(title)
    print(f"{'':<11}" + "".join(f"{column:>32}" for column in columns))
    print(f"{'backend':<11}" + f"{'s':>10} {'ratio':>9} {'overhead':>11}" * len(columns))
    base = figures["in-process"]
    for name, row in figures.items():
        line = f"{name:<11}"
        for column in columns:
            overhead = "-" if name == "in-process" else _overhead(row[column], base[column])
            ratio = _ratio(row[column], base[column])
            line += f"{statistics.median(row[column]):>10.3f} {ratio:>8.2f}x {overhead:>11}"
        print(line)


def _ratio(seconds: Sequence[float], base: Sequence[float]) -> float:
    """The median of each batch's ratio to the same batch in-process: pairing cancels out job sizes."""
    return statistics.median(s / b for s, b in zip(seconds, base, strict=True))


def _overhead(seconds: Sequence[float], base: Sequence[float]) -> str:
    return f"{_ratio(seconds, base) - 1:+.0%}"


def _arguments() -> tuple[argparse.Namespace, _bench.Session]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=40, help="candidates of each search")
    parser.add_argument("--jobs", type=int, default=32, help="candidate jobs replayed per cadence")
    parser.add_argument("--gap", type=float, default=3.0, help="pause before each batch, last cadence")
    parser.add_argument(
        "--backends", nargs="+", default=["process", "docker"], help="sandboxes measured against in-process"
    )
    args, session = _bench.start(parser)
    if session.quick:
        args.budget, args.jobs, args.gap, args.backends = 2, 2, 0.1, ["process"]
    return args, session


if __name__ == "__main__":
    main()
