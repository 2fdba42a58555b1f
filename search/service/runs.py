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
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import replace
from pathlib import Path
from typing import Any

import targets
from sandbox.base import Sandbox
from sandbox.job import Limits
from search import proposers
from search.all_settings import BY_NAME, SETTINGS
from search.errors import UserError
from search.executors.local import local_pool
from search.loop.holdout import WINDOW_OPTION, measure_tail, split
from search.loop.schedule import SCHEDULES
from search.loop.search import BaselineFailed, Reporter, Search
from search.loop.selection import default_select, run_instances
from search.proposers.base import Proposer, ProposerKind, ProposerUnavailable
from search.service import records
from search.service.journal import RunJournal
from search.settings import RunConfig, checked
from search.store.readmodel import ReadModel, RunInfo, RunReport, run_status
from search.store.store import Store, StoreError, open_engine
from targets.base import Option, OptionError, Target, WorkloadError, required, resolve_options

NOT_STARTED = "created, not started yet"
"""The message of a run stored but not executed yet (its executing process may start it any moment)."""
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
        """Store a prepared run; until a process executes it, it is stopped and resumable."""
        run = self.store.create_run(config.target, config.to_json())
        self.store.set_run_status(run.id, "stopped", NOT_STARTED)
        return self.read.run(run.id)

    def create(
        self, target: str, workload: str | None, options: Mapping[str, Any], **run_settings: Any
    ) -> RunInfo:
        return self.record(self.prepare(target, workload, options, **run_settings))

    def resume(self, run_id: str, **changes: Any) -> RunInfo:
        """A run made ready to continue; `changes` are settings a resume may change (its budget, caps,
        workers, sandbox, the proposer's endpoint), each logged. Any other setting is the run's own: one
        line says so."""
        info = self.read.run(run_id)
        run = self.store.run(info.run_id)
        assert run is not None
        if (
            info.status == "running"
            and run.pid not in (None, os.getpid())
            and run.host == socket.gethostname()
        ):
            raise UserError(f"run {run.id} is running in process {run.pid}; stop it before resuming")
        if info.kind != "search":
            again = (
                "rerun the same `crucible tune` command"
                if info.kind == "tune"
                else f"run the {info.kind} again"
            )
            raise UserError(f"run {run.id} is a {info.kind} run, not a search: {again} to continue it")
        config = RunConfig.from_json(info.config)
        kind = proposer_kind(config.proposer)
        own = {s.name: s for s in kind.settings}
        run_changes: dict[str, Any] = {}
        proposer_changes: dict[str, Any] = {}
        for name, value in changes.items():
            if value is None:
                continue
            setting = BY_NAME.get(name) or own.get(name)
            if setting is None:
                raise UserError(f"unknown setting {name!r}")
            if not setting.resumable:
                raise UserError(
                    f"{setting.switch} is run {run.id}'s own setting; a resumed run keeps it "
                    "(start a new search to change it)"
                )
            (run_changes if name in BY_NAME else proposer_changes)[name] = _checked(setting, value)
        new = replace(config, **run_changes)
        if proposer_changes:
            merged = {**config.proposer_settings, **proposer_changes}
            new = replace(new, proposer_settings=_configured(kind, merged))
        if new != config:
            self.store.set_run_config(run.id, new.to_json())
            shown = {**run_changes, **proposer_changes}
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
            Search(self.journal(run.id), sandbox, proposer, reporter, executor=pool).execute()
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
        measure_tail(self.journal(run_id), best, sandbox, pool, config.trials, config.seed, limits)

    def record_study(self, study: records.Study) -> str:
        """Store a tune study (its configured policy, trials and front) as its run of kind tune."""
        return records.record_study(self.store, study)

    def record_scores(
        self,
        kind: str,
        subject: str,
        target: str,
        config: Mapping[str, Any],
        policies: Sequence[records.Policy],
        metric: str,
        marker: Mapping[str, Any] | None = None,
    ) -> str:
        """Store policies' scores as a finished run of `kind` (ci, validate), of `subject`."""
        return records.record_scores(self.store, kind, subject, target, config, policies, metric, marker)

    def journal(self, run_id: str) -> RunJournal:
        """The reads and writes of one run that the code filling it goes through (the search loop)."""
        return RunJournal(self.store, self.read.run(run_id).run_id)

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


INTERNAL = ("islands", "gate_top_k", "migrate_every", "limits", "seeds", "schedule")
"""RunConfig fields a program may set (a benchmark, the CI job's seeds) that no front end offers."""


def prepare(target: str, workload: str | None, options: Mapping[str, Any], **given: Any) -> RunConfig:
    """A run's configuration, every part checked (the workload made absolute); nothing stored, no store
    needed, so a mistake never leaves even an empty database behind.

    `given` are settings by name (search/settings.py's and the chosen proposer's, as every front end
    names them); None leaves one at its default. `holdout`, a share of the workload's requests (the last
    in time), is cut off here: the run's window is the head; `select` None is the default for the split.
    """
    found = load_target(target)
    workload, values = resolve(found, workload, options)
    given = {k: v for k, v in given.items() if v is not None}
    run = {k: given.pop(k) for k in list(given) if k in BY_NAME}
    internal = {k: given.pop(k) for k in list(given) if k in INTERNAL}
    try:
        run = checked(SETTINGS, run)
    except OptionError as exc:
        raise UserError(str(exc)) from None
    try:
        required(found, run["require"], values)
    except OptionError as exc:
        raise UserError(str(exc)) from None
    engine = run["for_engine"]
    if engine is not None and engine not in found.exports():
        engines = ", ".join(found.exports()) or "no engine"
        raise UserError(f"--for {engine}: target {target} exports to {engines}")
    kind = proposer_kind(run["proposer"])
    stray = [name for name in given if name not in {s.name for s in kind.settings}]
    if stray:
        owners = [n for n in proposers.names() if stray[0] in {s.name for s in proposers.load(n).settings}]
        if owners:
            raise UserError(f"{_flag(stray[0])} applies to --proposer {' or '.join(owners)}")
        raise UserError(f"unknown run setting {stray[0]!r}")
    proposer_settings = _configured(kind, _checked_all(kind, given))
    if run["max_cost_usd"] is not None and (unpriced := kind.unpriced(proposer_settings)):
        raise UserError(f"--max-cost-usd needs a --price for every model; none for {', '.join(unpriced)}")
    share = run.pop("holdout")
    cut = None if share is None else split(found, workload, values, share)
    if cut:
        values[WINDOW_OPTION] = cut.head
    held = {"holdout": cut.to_json()} if cut else {}
    select = run.pop("select") or default_select(found, cut is not None)
    config = RunConfig(
        target=target,
        workload=workload,
        options=values,
        select=select,
        proposer_settings=proposer_settings,
        **run,
        **internal,
        **held,
    )
    if config.schedule not in SCHEDULES:
        raise UserError(f"unknown schedule {config.schedule!r}; choose {' or '.join(SCHEDULES)}")
    try:  # a bad trace or size fails here, nothing stored
        run_instances(found, workload, values, config.select)
    except UserError as exc:
        if cut is None:
            raise
        given = f"of requests {options[WINDOW_OPTION]} " if options.get(WINDOW_OPTION) else ""
        raise UserError(f"--holdout {share:g} {given}leaves the head {cut.head}: {exc}") from None
    return config


def proposer_kind(name: str) -> ProposerKind:
    """The installed proposer called `name`; one line naming the known ones."""
    try:
        return proposers.load(name)
    except LookupError as exc:
        raise UserError(str(exc)) from None


def proposer_names() -> tuple[str, ...]:
    """The installed proposers a run may be created with."""
    return proposers.names()


def _flag(name: str) -> str:
    """How the front ends name a proposer's setting: its flag."""
    return next((s.switch for s in proposers.settings() if s.name == name), name)


def _checked(setting: Option, value: Any) -> Any:
    try:
        return setting.check(value)
    except OptionError as exc:
        raise UserError(str(exc)) from None


def _checked_all(kind: ProposerKind, given: Mapping[str, Any]) -> dict[str, Any]:
    """Every setting of the proposer: the given ones checked, the others at their defaults."""
    own = {s.name: s for s in kind.settings}
    return {name: _checked(s, given[name]) if name in given else s.default for name, s in own.items()}


def _configured(kind: ProposerKind, values: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return kind.configure(values)
    except ValueError as exc:
        raise UserError(str(exc)) from None


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


def proposer_for(config: RunConfig, environ: Mapping[str, str]) -> Proposer:
    """The run's proposer; one that reads a key reads it from `environ`, never from the store, and checks
    what it needs (key, endpoint, templates) here, so a front end fails before it stores or runs anything."""
    kind = proposer_kind(config.proposer)
    try:
        return kind.create(config.proposer_settings, environ)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def proposer_of(settings: Mapping[str, Any], environ: Mapping[str, str]) -> Proposer:
    """The proposer that settings by name choose (`proposer` and its own; the run settings ignored),
    checked as a run's is: a front end that runs several searches (the CI job) fails before any."""
    kind = proposer_kind(settings.get("proposer", BY_NAME["proposer"].default))
    own = {s.name for s in kind.settings}
    values = _configured(kind, _checked_all(kind, {k: v for k, v in settings.items() if k in own}))
    try:
        return kind.create(values, environ)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def open_service(url: str, create: bool = True, attempts: int = 5) -> RunService:
    """The service on the store at `url`: the one way every front end opens a store (created unless
    `create` is False: a reader never makes an empty database out of a mistyped URL). Processes that make
    one new store at the same moment race to create its tables; the losers open it again."""
    for attempt in range(attempts):
        try:
            return RunService(Store(open_engine(url, create=create)))
        except StoreError:
            if not create or attempt + 1 == attempts:
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")
