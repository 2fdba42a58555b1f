"""The steady-state loop: `workers` jobs in flight, a freed slot refilled at once, and the run the same
whatever order its jobs finish in, killed and resumed or not."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from in_process import InProcess

from sandbox.job import Job, Result
from search.errors import UserError
from search.loop.schedule import Batches, SteadyState
from search.proposers.evolve.proposer import EvolveProposer
from search.service.runs import RunService, prepare
from search.store.store import Store, open_engine

KV = {"capacity": 300}


@dataclass
class Paced:
    """The real in-process sandbox, holding each job for a time its source decides (jobs of differing
    length, finishing out of order) and counting how many run at once."""

    seconds: dict[str, float] = field(default_factory=dict)
    default_s: float = 0.0
    name: str = "paced"
    running: int = 0
    most: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, job: Job) -> Result:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            time.sleep(self.seconds.get(job.source, self.default_s))
            return InProcess().run(job)
        finally:
            with self.lock:
                self.running -= 1


class Interrupting:
    """Runs `allowed` candidate jobs, then every later one ends the search as Ctrl-C would: a killed run."""

    name = "interrupting"

    def __init__(self, allowed: int) -> None:
        self.allowed = allowed
        self.lock = threading.Lock()

    def run(self, job: Job) -> Result:
        with self.lock:
            self.allowed -= job.tuning is not None  # baselines are not tuned
            if self.allowed < 0:
                raise KeyboardInterrupt
        return InProcess().run(job)


def service(tmp_path: Path, name: str) -> RunService:
    return RunService(Store(open_engine(f"sqlite:///{tmp_path / name}.db")))


def leaderboard(runs: RunService, run_id: str) -> list[tuple]:
    return [(c.seq, c.source, c.status, c.score, c.params) for c in runs.read.candidates(run_id)]


def search(runs: RunService, sandbox: object, workers: int = 2, budget: int = 8, **settings: object) -> str:
    info = runs.record(
        prepare("kv", "gen:chat:1", KV, budget=budget, trials=2, workers=workers, seed=3, **settings)
    )
    with ThreadPoolExecutor(max_workers=workers) as pool:
        runs.execute(info.run_id, sandbox, EvolveProposer(), executor=pool)  # type: ignore[arg-type]
    return info.run_id


def test_the_same_seed_gives_the_same_run_whatever_order_the_jobs_finish_in(tmp_path: Path) -> None:
    steady = service(tmp_path, "steady")
    first = search(steady, InProcess())
    sources = [c.source for c in steady.read.candidates(first) if not c.is_baseline]
    shuffled = Paced({source: 0.05 * (i % 3) for i, source in enumerate(reversed(sources))})
    again = service(tmp_path, "again")
    second = search(again, shuffled)
    finished = [c.seq for c in sorted(again.read.candidates(second), key=lambda c: c.finished_at or 0)]
    assert finished != sorted(finished), "the jobs must finish out of order for this test to mean anything"
    assert leaderboard(again, second) == leaderboard(steady, first)
    assert sum(c.status == "evaluated" for c in steady.read.candidates(first) if not c.is_baseline) >= 2


def test_a_freed_slot_takes_the_next_candidate_while_a_long_job_runs(tmp_path: Path) -> None:
    runs = service(tmp_path, "probe")
    first = search(runs, InProcess(), budget=1)
    (slow,) = [c.source for c in runs.read.candidates(first) if not c.is_baseline]
    timed = {"steady": Paced({slow: 1.5}), "batch": Paced({slow: 1.5})}
    overtaken = {}
    for schedule, sandbox in timed.items():
        store = service(tmp_path, schedule)
        run_id = search(store, sandbox, budget=6, schedule=schedule)
        rows = [c for c in store.read.candidates(run_id) if not c.is_baseline]
        assert rows[0].source == slow, "the same first candidate as the probe run"
        overtaken[schedule] = sum(c.finished_at < rows[0].finished_at for c in rows[1:])  # type: ignore[operator]
        assert sandbox.most <= 2, "never more jobs in flight than workers"
    assert overtaken["batch"] == 1, "a batch waits for its slowest job"
    assert overtaken["steady"] >= 3, "the other slot kept taking candidates"


def test_a_killed_run_resumes_to_exactly_the_unbroken_run(tmp_path: Path) -> None:
    whole = service(tmp_path, "whole")
    unbroken = search(whole, InProcess(), workers=3, budget=9)
    killed = service(tmp_path, "killed")
    with pytest.raises(KeyboardInterrupt):
        search(killed, Interrupting(allowed=4), workers=3, budget=9)
    (run_id,) = [r.run_id for r in killed.read.runs()]
    statuses = [c.status for c in killed.read.candidates(run_id) if not c.is_baseline]
    assert "pending" in statuses and len(statuses) < 9, "killed mid-run with jobs in flight"
    killed.resume(run_id)
    with ThreadPoolExecutor(max_workers=3) as pool:
        killed.execute(run_id, InProcess(), EvolveProposer(), executor=pool)
    assert leaderboard(killed, run_id) == leaderboard(whole, unbroken)


def test_schedules_name_the_results_a_candidate_is_proposed_from() -> None:
    assert [SteadyState(2).view_end(seq) for seq in range(6)] == [-3, -2, -1, 0, 1, 2]
    assert [Batches(2).view_end(seq) for seq in range(6)] == [0, 0, 2, 2, 4, 4]
    with pytest.raises(UserError, match="unknown schedule 'fifo'; choose steady or batch"):
        prepare("kv", "gen:chat:1", KV, schedule="fifo")
