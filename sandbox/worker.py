"""Runs inside a sandbox: a Job as JSON on stdin, a Result as JSON on stdout, everything else on stderr."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import random
import re
import shutil
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import targets
from targets.base import Instance, Target, WorkloadError
from verifiers.compiler import to_python
from verifiers.program import ParamRange, Program
from verifiers.static import StaticError, check

from .job import InstanceResult, Job, Result, Status, TrialRecord
from .tuner import tune

MESSAGE_CHARS = 1000
"""Longest message a Result carries; messages are one line for the proposer and the UI."""
DENIED_ERRNOS = frozenset(
    {errno.EPERM, errno.EACCES, errno.EROFS, errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EAGAIN}
)
"""How a sandbox refuses: no permission, a read-only root, no network, no more processes (fork's EAGAIN)."""
BEHAVIOUR_DRAWS = 3
"""Seeded points of the PARAMS ranges a behaviour is measured at, besides the defaults: programs that rank
alike at their defaults only (a weight on a term that is 0 by default) stay apart."""


def seed_numba_cache() -> None:
    """Copy kernels compiled into the image (CRUCIBLE_NUMBA_SEED) to the cache: numba skips read-only dirs."""
    seed = os.environ.get("CRUCIBLE_NUMBA_SEED")
    if seed and Path(seed).is_dir():
        shutil.copytree(seed, os.environ["NUMBA_CACHE_DIR"], dirs_exist_ok=True)


def one_line(exc: BaseException) -> str:
    """An exception as one bounded line: its type and message."""
    text = re.sub(r"\s+", " ", f"{type(exc).__name__}: {exc}").strip()
    return text[:MESSAGE_CHARS]


def run(job: Job, loaded: Target | None = None) -> Result:
    """Run a job in this process; a candidate's failure becomes a classified Result, never an exception.
    `loaded` is the job's target where the caller has it already (a zygote loads each once)."""
    start = time.monotonic()
    try:
        target = loaded if loaded is not None else targets.load(job.target)
    except (KeyError, ImportError) as exc:
        return Result("crashed", one_line(exc), seconds=time.monotonic() - start)
    status: Status = "ok"
    try:
        if job.builtin:
            result = _builtin(job, target)
        elif job.skip_check:
            result = _unchecked(job, target)
        else:
            result = _checked(job, target)
    except StaticError as exc:
        message = str(exc)[:MESSAGE_CHARS]
        status = "invalid"
    except WorkloadError as exc:
        message = one_line(exc)
        status = "crashed"
    except MemoryError:
        message = "MemoryError: out of memory"
        status = "oom"
    except OSError as exc:
        message = one_line(exc)
        status = "denied" if exc.errno in DENIED_ERRNOS else "invalid"
    except Exception as exc:  # whatever the candidate's code, its compile or its run raised
        message = one_line(exc)
        status = "invalid"
    if status != "ok":  # built outside the handlers so a ballooned frame is already released
        return Result(status, message, seconds=time.monotonic() - start)
    return replace(result, seconds=time.monotonic() - start)


def _checked(job: Job, target: Target) -> Result:
    program = check(job.source, target.signatures)
    start = _start_params(program, job.params)
    behaviour = behaviour_signature(target, program)
    if job.tuning and behaviour and behaviour in job.tuning.seen:
        return Result("ok", behaviour=behaviour, repeated=True)
    train = [i for i in job.instances if i.role == "train"]
    scored: dict[tuple[float, ...], list[InstanceResult]] = {}

    def train_objective(params: dict[str, float]) -> float:
        results = [_evaluate(target, program, i, params) for i in train]
        scored[_key(program, params)] = results
        return math.fsum(r.metrics[target.objective.metric] for r in results) / len(results)

    params, trials, gated = start, 0, False
    history: tuple[TrialRecord, ...] = ()
    if job.tuning and train:
        ranges = tuple(replace(p, default=start[p.name]) for p in program.params)
        outcome = tune(
            train_objective, ranges, target.objective.direction, job.tuning.trials, job.tuning.seed
        )
        if not math.isfinite(outcome.best_value):
            raise ValueError(f"no trial gave a finite {target.objective.metric}")
        params, trials, history = outcome.best_params, outcome.trials_run, outcome.history
        gate = job.tuning.gate
        gated = gate is not None and target.objective.better(gate, outcome.best_value)
    elif train:
        train_objective(params)
    done = list(scored[_key(program, params)]) if train else []
    if not gated:
        done += [_evaluate(target, program, i, params) for i in job.instances if i.role != "train"]
    return Result(
        "ok",
        params=params,
        instances=tuple(done),
        trials=trials,
        study=history,
        gated=gated,
        behaviour=behaviour,
    )


def behaviour_signature(target: Target, program: Program) -> str:
    """A hash of how the program ranks the target's behaviour sample (dense ranks within each decision, ties
    kept, the target's cuts among them) and of the PARAMS its mechanism reads, at its defaults and at
    BEHAVIOUR_DRAWS seeded points of its ranges; empty if there is no sample."""
    if not any(target.behaviour_sample(s.name) for s in target.signatures):
        return ""
    points = [program.defaults(), *(_drawn(program.params, draw) for draw in range(BEHAVIOUR_DRAWS))]
    digest = hashlib.sha256()
    for params in points:
        digest.update(repr([params.get(name) for name in target.mechanism_params()]).encode())
    for signature in target.signatures:
        key = to_python(program, signature.name)
        cuts = target.behaviour_cuts(signature.name)
        for decision in target.behaviour_sample(signature.name):
            for params in points:
                digest.update(repr(_ranks([_score(key, row, params) for row in decision], cuts)).encode())
    return digest.hexdigest()[:16]


def _drawn(ranges: tuple[ParamRange, ...], draw: int) -> dict[str, float]:
    """The same quantile of each range (by position) in every program, on a log scale where it is log."""
    values = {}
    for i, r in enumerate(ranges):
        u = random.Random(f"behaviour:{draw}:{i}").random()
        values[r.name] = r.low * (r.high / r.low) ** u if r.log else r.low + u * (r.high - r.low)
    return values


def _score(key: Any, row: Mapping[str, float], params: Mapping[str, float]) -> float:
    """The key's value, NaN where it faults (Python raises where the compiled key returns inf or NaN)."""
    try:
        return key(row, params)
    except (ArithmeticError, ValueError):
        return math.nan


def _ranks(scores: list[float], cuts: tuple[float, ...]) -> tuple[int, ...]:
    """Dense ranks among the scores and the mechanism's cuts (equal values share one), NaN as -1: what
    orders the mechanism's choices and places each on its side of a cut."""
    order = {value: i for i, value in enumerate(sorted({s for s in scores if not math.isnan(s)} | set(cuts)))}
    return tuple(-1 if math.isnan(s) else order[s] for s in scores)


def _builtin(job: Job, target: Target) -> Result:
    """A target's built-in baseline (a mechanism variant, not a candidate) on every instance."""
    results = []
    for instance in job.instances:
        start = time.perf_counter()
        metrics = target.evaluate_builtin(job.builtin, instance)
        results.append(InstanceResult(instance.label, instance.role, metrics, time.perf_counter() - start))
    return Result("ok", instances=tuple(results))


def _start_params(program: Program, given: Mapping[str, float] | None) -> dict[str, float]:
    """The job's fixed values over the program's defaults; the start point of tuning."""
    unknown = sorted(set(given or {}) - set(program.param_names()))
    if unknown:
        raise ValueError(f"unknown parameters: {', '.join(unknown)}")
    return {**program.defaults(), **{k: float(v) for k, v in (given or {}).items()}}


def _key(program: Program, params: Mapping[str, float]) -> tuple[float, ...]:
    return tuple(float(params[name]) for name in program.param_names())


def _evaluate(
    target: Target, program: Program, instance: Instance, params: Mapping[str, float]
) -> InstanceResult:
    start = time.perf_counter()
    metrics = target.evaluate(program, instance, params)
    return InstanceResult(instance.label, instance.role, metrics, time.perf_counter() - start)


def _unchecked(job: Job, target: Target) -> Result:
    """Exec the raw source, call each function once per instance: lets the sandbox tests run hostile code."""
    namespace: dict[str, Any] = {}
    exec(compile(job.source, "<candidate>", "exec"), namespace)
    params = SimpleNamespace(**(job.params or {}))
    results = []
    for instance in job.instances:
        start = time.perf_counter()
        metrics = {
            s.name: float(namespace[s.name](SimpleNamespace(**dict.fromkeys(s.features, 1.0)), params))
            for s in target.signatures
        }
        results.append(InstanceResult(instance.label, instance.role, metrics, time.perf_counter() - start))
    return Result("ok", params=dict(job.params or {}), instances=tuple(results))


@contextlib.contextmanager
def _silenced() -> Iterator[None]:
    """Both output descriptors to /dev/null, and back."""
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def serve_one(job: Job, loaded: Target | None = None) -> None:
    """Run the job in this (confined) process and write its result alone to stdout: noise from the
    candidate, numba or Optuna, even from native code, lands on stderr. The zygote's child calls this."""
    result_fd = os.dup(1)
    os.dup2(2, 1)
    worker = os.getpid()
    result = run(job, loaded)
    if os.getpid() != worker:  # a process the candidate forked came back here: it must not speak for us
        os._exit(1)
    with os.fdopen(result_fd, "w", encoding="utf-8") as out:
        out.write(json.dumps(result.to_json()) + "\n")


def warm_tuner() -> None:
    """Import Optuna's lazily loaded parts by tuning a trivial objective, so a job does not pay for it."""
    with _silenced():
        tune(lambda _: 0.0, (ParamRange("x", 0.0, 1.0),), "maximize", 2, 0)
