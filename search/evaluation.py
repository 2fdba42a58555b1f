"""Evaluations outside a run: a target's baselines, or one heuristic file, on a workload; and Z3 on a file.

Nothing here is stored; the inputs are checked (workload made absolute, options resolved) exactly as the
run service checks a run's, so `baselines`, `eval` and `search` accept and refuse the same things.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sandbox.base import Sandbox
from sandbox.job import Tuning
from search.errors import UserError
from search.jobs import job, run
from search.loop.search import domains
from search.service.runs import instances, resolve
from search.store.readmodel import Verdict
from targets.base import Instance, Target, timelines
from verifiers.program import Program
from verifiers.properties import Outcome, Property
from verifiers.smt import Verifier
from verifiers.static import StaticError, check


@dataclass(frozen=True)
class Planned:
    """A checked workload (absolute if a file), the options with their defaults, and the instances."""

    workload: str
    options: dict[str, Any]
    instances: tuple[Instance, ...]


def plan(target: Target, workload: str | None, options: dict[str, Any]) -> Planned:
    """Check what a user asked to evaluate on, before a sandbox is chosen or anything runs."""
    workload, values = resolve(target, workload, options)
    return Planned(workload, values, tuple(instances(target, workload, values)))


@dataclass(frozen=True)
class Timelines:
    """Figures over time (targets.base.TIMELINE): series -> lanes -> points, `step_s` apart."""

    step_s: float
    series: dict[str, list[list[float]]]


def split(metrics: dict[str, float]) -> tuple[dict[str, float], Timelines | None]:
    """An evaluation's metrics and, apart, its figures over time (None where it keeps none)."""
    plain, series, step_s = timelines(metrics)
    return plain, Timelines(step_s, series) if series else None


@dataclass(frozen=True)
class BaselineTable:
    """Every baseline's metrics on the eval instance of a workload."""

    workload: str
    options: dict[str, Any]
    instance: str
    baselines: dict[str, dict[str, float]]
    timelines: dict[str, Timelines] = field(default_factory=dict)
    """Each baseline's figures over time, where the target keeps them (a serving fleet's)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class FileEvaluation:
    """A heuristic file's metrics on a workload, its (tuned or default) PARAMS and the hard properties Z3
    refuted before it ran (evaluated anyway: `verify` is the check that fails)."""

    file: str
    workload: str
    options: dict[str, Any]
    instance: str
    params: dict[str, float]
    metrics: dict[str, float]
    backend: str
    refuted: list[Verdict]
    timelines: Timelines | None = None
    """Its figures over time, where the target keeps them (a serving fleet's)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def evaluate_baselines(
    target: Target,
    planned: Planned,
    sandbox: Sandbox,
    workers: int,
    executor: Executor | None = None,
) -> BaselineTable:
    """Run every baseline (candidate-format and built-in) on the workload's eval instances."""
    if workers < 1:
        raise UserError(f"--workers must be a whole number of at least 1, got {workers}")
    evals = tuple(i for i in planned.instances if i.role == "eval")
    jobs = [job(target.name, source, evals) for source in target.baselines().values()]
    jobs += [job(target.name, "", evals, builtin=name) for name in target.builtin_baselines()]
    names = [*target.baselines(), *target.builtin_baselines()]
    if executor is None:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = run(sandbox, jobs, pool)
    else:
        results = run(sandbox, jobs, executor)
    table: dict[str, dict[str, float]] = {}
    over_time: dict[str, Timelines] = {}
    for name, result in zip(names, results, strict=True):
        if result.status != "ok":
            raise UserError(f"baseline {name} failed: {result.status}: {result.message}")
        table[name], kept = split(result.instances[0].metrics)
        if kept is not None:
            over_time[name] = kept
    return BaselineTable(planned.workload, planned.options, evals[0].label, table, over_time)


def evaluate_file(
    target: Target,
    file: str,
    program: Program,
    planned: Planned,
    sandbox: Sandbox,
    tuning: Tuning | None = None,
) -> FileEvaluation:
    """Prove the file's properties, then evaluate it (tuning PARAMS on the train instances if asked)."""
    chosen = list(planned.instances)
    if tuning is None:
        chosen = [i for i in chosen if i.role == "eval"]
    refuted = [
        Verdict(o.property, o.severity, o.verdict, o.seconds, o.counterexample, o.message)
        for o in verify(target, program)
        if o.rejects
    ]
    params = program.defaults()
    (result,) = run(sandbox, [job(target.name, program.source, chosen, params=params, tuning=tuning)])
    if result.status != "ok":
        raise UserError(f"{file}: evaluation {result.status}: {result.message}")
    evals = [i for i in result.instances if i.role == "eval"]
    plain, kept = split(evals[0].metrics) if evals else ({}, None)
    return FileEvaluation(
        file=file,
        workload=planned.workload,
        options=planned.options,
        instance=evals[0].label if evals else "",
        params=result.params,
        metrics=plain,
        timelines=kept,
        backend=result.backend,
        refuted=refuted,
    )


def verify(
    target: Target, program: Program, seconds: float = 2.0, required: Sequence[Property] = ()
) -> list[Outcome]:
    """Z3's verdict on each of the target's properties, and on those a run requires."""
    with Verifier(seconds=seconds) as verifier:
        return list(verifier.verify(program, domains(target), (*target.properties(), *required)))


def read_program(target: Target, path: Path) -> Program:
    """A heuristic file's checked program; UserError names the file and why not."""
    try:
        source = path.read_text()
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path} is not a UTF-8 text file") from None
    return checked(target, source, str(path))


def checked(target: Target, source: str, name: str) -> Program:
    """The program of `source` under the target's signatures; UserError names it and the first breach."""
    try:
        return check(source, target.signatures)
    except StaticError as exc:
        raise UserError(f"{name}: {exc}") from None
