"""The one door for sandbox jobs: every search, held-out tail, evaluation, tune study, validation and CI
check builds its jobs with `job` and runs them with `run`, so what a job is (its program, instances,
constants, tuning and limits) and how its tuning is seeded are decided in one place."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Executor

from sandbox.base import Sandbox
from sandbox.job import Job, Limits, Result, Tuning
from targets.base import Instance


def job(
    target: str,
    source: str,
    instances: Sequence[Instance],
    *,
    params: Mapping[str, float] | None = None,
    tuning: Tuning | None = None,
    builtin: str = "",
    limits: Limits | None = None,
) -> Job:
    """A job of `target` on `instances`: a program's `source` (tuned first where `tuning` is given, else at
    `params`, or its own defaults where none are given), or the built-in baseline `builtin`."""
    return Job(
        target,
        source,
        tuple(instances),
        params=None if params is None else dict(params),
        tuning=tuning,
        builtin=builtin,
        limits=limits or Limits(),
    )


def tuning(trials: int, seed: int, seq: int, gate: float | None = None, seen: Sequence[str] = ()) -> Tuning:
    """How candidate `seq` of a run seeded `seed` is tuned: with its own Optuna seed, so a run is the same
    whichever order its jobs finish in (a baseline's seq is below 0)."""
    return Tuning(trials=trials, seed=(seed * 100_003 + seq) % 2**32, gate=gate, seen=tuple(seen))


def run(sandbox: Sandbox, jobs: Sequence[Job], executor: Executor | None = None) -> list[Result]:
    """Each job's result in order, run on the executor (side by side) or one after another here."""
    if executor is None:
        return [sandbox.run(j) for j in jobs]
    return list(executor.map(sandbox.run, jobs))
