"""The run service: create, resume, execute and stop runs, and read them; every front end stands on it.

The CLI, the UI, the CI job and distributed workers call these functions rather than orchestrating a run
themselves. Everything a user gives is checked before anything is stored, and every mistake is one
UserError line; evaluation jobs go to an executor the caller may inject (a local pool by default).
"""

from __future__ import annotations

import json
import os
import signal
import socket
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import targets
from sandbox.base import Sandbox
from sandbox.job import Limits
from search.errors import UserError
from search.executors.local import local_pool
from search.loop.holdout import WINDOW_OPTION, check_share, measure_tail, split
from search.loop.schedule import SCHEDULES
from search.loop.search import BaselineFailed, Reporter, RunConfig, Search
from search.loop.selection import default_select, run_instances
from search.proposers.base import Proposer, ProposerUnavailable
from search.proposers.evolve import EvolveProposer
from search.proposers.llm import LLMConfig, LLMProposer, api_key
from search.proposers.mix import MixProposer
from search.store.readmodel import ReadModel, RunInfo, RunReport, run_status
from search.store.store import Store
from targets.base import Option, OptionError, Target, WorkloadError, resolve_options

ExecutorFactory = Callable[[int], Executor]
"""Makes the executor of a run from its `workers` setting."""


class RunService:
    """Runs in one store: `read` answers questions, the methods change runs."""

    def __init__(self, store: Store, executor_factory: ExecutorFactory = local_pool) -> None:
        self.store = store
        self.read = ReadModel(store)
        self.executor_factory = executor_factory

    def prepare(
        self, target: str, workload: str | None, options: Mapping[str, Any], **run_settings: Any
    ) -> RunConfig:
        return prepare(target, workload, options, **run_settings)

    def record(self, config: RunConfig) -> RunInfo:
        """Store a prepared run (status running until it is executed)."""
        run = self.store.create_run(config.target, config.to_json())
        return self.read.run(run.id)

    def create(
        self, target: str, workload: str | None, options: Mapping[str, Any], **run_settings: Any
    ) -> RunInfo:
        return self.record(self.prepare(target, workload, options, **run_settings))

    def resume(
        self,
        run_id: str,
        *,
        max_cost_usd: float | None = None,
        max_tokens: int | None = None,
        base_url: str | None = None,
    ) -> RunInfo:
        """A run made ready to continue, with its caps raised or its endpoint moved (logged if changed)."""
        info = self.read.run(run_id)
        run = self.store.run(info.run_id)
        assert run is not None
        if (
            info.status == "running"
            and run.pid not in (None, os.getpid())
            and run.host == socket.gethostname()
        ):
            raise UserError(f"run {run.id} is running in process {run.pid}; stop it before resuming")
        config = RunConfig.from_json(info.config)
        changes: dict[str, Any] = {}
        for name, value in (("max_cost_usd", max_cost_usd), ("max_tokens", max_tokens)):
            if value is not None:
                changes[name] = value
        if base_url and config.llm:
            changes["llm"] = {**config.llm, "base_url": base_url}
        new = replace(config, **changes)
        check_settings(new)
        if new != config:
            self.store.set_run_config(run.id, new.to_json())
            shown = {k: v for k, v in changes.items() if k != "llm"}
            if "llm" in changes:
                shown["base_url"] = base_url
            self.store.log(run.id, "config", f"resumed with {json.dumps(shown, sort_keys=True)}")
        return self.read.run(run.id)

    def execute(
        self,
        run_id: str,
        sandbox: Sandbox,
        proposer: Proposer,
        reporter: Reporter | None = None,
        executor: Executor | None = None,
    ) -> RunReport:
        """Run (or continue) a stored run to its end or a stop; the report is read back from the store.

        An interrupt stops the run resumably; a proposer that goes away stops it resumably (what it spent
        logged); a baseline that cannot run fails it with the reason, as a UserError.
        """
        run = self.store.run(self.read.run(run_id).run_id)
        assert run is not None
        config = RunConfig.from_json(json.loads(run.config))
        pool = executor or self.executor_factory(config.workers)
        try:
            Search(self.store, run, sandbox, proposer, reporter, executor=pool).execute()
            self._score_tail(run.id, config, sandbox, pool, reporter)
        except KeyboardInterrupt:
            self.stop(run.id, "interrupted")
            raise
        except ProposerUnavailable as exc:
            self.store.set_run_status(run.id, "stopped", str(exc))
            spent = {
                "proposer": exc.proposer,
                "model": exc.model,
                "tokens": exc.tokens,
                "cost_usd": exc.cost_usd,
            }
            self.store.log(run.id, "stopped", str(exc), **spent)
            raise
        except BaselineFailed as exc:
            raise UserError(f"run {run.id} failed: {exc}") from None
        finally:
            if executor is None:
                pool.shutdown(wait=True, cancel_futures=True)
        return self.read.report(run.id)

    def _score_tail(
        self, run_id: str, config: RunConfig, sandbox: Sandbox, pool: Executor, reporter: Reporter | None
    ) -> None:
        """A run with a holdout that ended (its budget spent, or stopped by its time budget or a cap): its
        best candidate and baselines scored on the held-out tail; a resumed run adds a newer best."""
        info = self.read.run(run_id)
        if not config.holdout or info.status not in ("finished", "stopped"):
            return
        if reporter:
            reporter.note(f"scoring the held-out tail {config.holdout['tail']}")
        best = info.best.candidate_id if info.best else None
        limits = Limits(**config.limits)
        measure_tail(self.store, run_id, best, sandbox, pool, config.trials, config.seed, limits)

    def stop(self, run_id: str, reason: str = "stopped") -> None:
        """Stop a run resumably: a live process of it on this machine is interrupted (it stores the run
        stopped itself, as on Ctrl-C); a run whose process is gone is marked stopped here."""
        run = self.store.run(self.read.run(run_id).run_id)
        assert run is not None
        status = run_status(run)
        live = status == "running" and run.host == socket.gethostname() and run.pid is not None
        if live and run.pid != os.getpid():
            os.kill(run.pid, signal.SIGINT)  # type: ignore[arg-type]
            return
        if status in ("running", "interrupted"):
            self.store.set_run_status(run.id, "stopped", reason)
            self.store.log(run.id, "stopped", reason)


def prepare(
    target: str, workload: str | None, options: Mapping[str, Any], *, holdout: Any = None, **run_settings: Any
) -> RunConfig:
    """A run's configuration, every part checked (the workload made absolute); nothing stored, no store
    needed, so a mistake never leaves even an empty database behind.

    `run_settings` are RunConfig's other fields (budget, seed, trials, workers, proposer, ...); `holdout`,
    a share of the workload's requests (the last in time), is cut off here: the run's window is the head;
    `select` None (or absent) is the default for the split (search/loop/selection.py).
    """
    found = load_target(target)
    workload, values = resolve(found, workload, options)
    cut = None if holdout is None else split(found, workload, values, check_share(holdout))
    if cut:
        values[WINDOW_OPTION] = cut.head
    unknown = sorted(set(run_settings) - {f.name for f in fields(RunConfig)})
    if unknown:
        raise UserError(f"unknown run setting {unknown[0]!r}")
    held = {"holdout": cut.to_json()} if cut else {}
    select = run_settings.pop("select", None) or default_select(cut is not None)
    config = RunConfig(
        target=target, workload=workload, options=values, select=select, **run_settings, **held
    )
    check_settings(config)
    run_instances(found, workload, values, config.select)  # a bad trace or size fails here, nothing stored
    return config


def target_names() -> tuple[str, ...]:
    """The targets a run may be created for."""
    return targets.names()


def load_target(name: str) -> Target:
    """The target called `name`; UserError names the known ones."""
    try:
        return targets.load(name)
    except KeyError as exc:
        raise UserError(str(exc.args[0])) from None


def resolve(target: Target, workload: str | None, given: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The workload (the target's shipped one if None) and the options with defaults, files made absolute:
    a job runs in a scratch folder, so a relative path would name nothing there."""
    try:
        values = resolve_options(target.options, given)
    except OptionError as exc:
        raise UserError(str(exc)) from None
    for option in target.options:
        if option.type == "path" and option.name in values:
            values[option.name] = absolute_file(option, values[option.name])
    chosen = workload if workload is not None else target.default_config()["workload"]
    return absolute_workload(chosen), values


def absolute_workload(workload: str) -> str:
    """A workload that is a file (or no generator spec such as `gen:chat:1`) as an absolute path."""
    path = Path(workload).expanduser()
    if path.exists() or ":" not in workload:
        return str(path.resolve())
    return workload


def absolute_file(option: Option, value: str) -> str:
    """A path option's value: one of its named choices as it is, else the file as an absolute path."""
    if value in option.choices:
        return value
    return str(Path(value).expanduser().resolve())


def instances(target: Target, workload: str, options: Mapping[str, Any]) -> list[Any]:
    """The target's instances, its complaints about the workload or options as UserError."""
    try:
        return target.instances(workload, options)
    except (WorkloadError, OptionError) as exc:
        raise UserError(str(exc)) from None


def check_settings(config: RunConfig) -> None:
    """The run's own settings in range: one line naming the first that is not (as the CLI's flag, the name
    every front end shows for it)."""
    whole = {"--budget": config.budget, "--trials": config.trials, "--workers": config.workers}
    for name, value in whole.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise UserError(f"{name} must be a whole number of at least 1, got {value!r}")
    positive = {
        "--time-budget": config.time_budget_s,
        "--max-cost-usd": config.max_cost_usd,
        "--max-tokens": config.max_tokens,
    }
    for flag, value in positive.items():
        if value is not None and not value > 0:
            raise UserError(f"{flag} must be positive, got {value}")
    if config.proposer not in ("evolve", "llm", "mix"):
        raise UserError(f"unknown proposer {config.proposer!r}; choose evolve, llm or mix")
    if config.schedule not in SCHEDULES:
        raise UserError(f"unknown schedule {config.schedule!r}; choose {' or '.join(SCHEDULES)}")


def proposer_for(config: RunConfig, environ: Mapping[str, str]) -> Proposer:
    """The run's proposer; an LLM one reads its key from `environ`, never from the store, and is checked
    (key, endpoint, templates) here, so a front end fails before it stores or runs anything."""
    if config.proposer == "evolve":
        return EvolveProposer()
    try:
        settings = LLMConfig.from_json(config.llm)
        llm = LLMProposer(settings, api_key(settings, environ))
    except ValueError as exc:
        raise UserError(str(exc)) from None
    llm.check()
    return llm if config.proposer == "llm" else MixProposer(llm, EvolveProposer(), settings.share)
