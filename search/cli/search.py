"""`crucible search`: create a run from the flags (every run setting and proposer setting is a flag
generated from its declaration) or resume a stored one, execute it with a progress bar, print the result."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from search.all_settings import SETTINGS
from search.cli import parsing
from search.cli.parsing import add_db, add_json, add_setting, add_workload, given

if TYPE_CHECKING:
    from concurrent.futures import Executor

RUN_FLAGS = tuple(s for s in SETTINGS if s.name not in ("sandbox", "workers"))
"""The run settings `search` takes beside the workload's (those add_workload gives every command)."""


def add_parser(sub: Any, name: str, help_text: str) -> None:
    from search import proposers

    s = parsing.add_command(
        sub,
        name,
        help_text,
        epilog="Every setting but --budget, --time-budget, --workers, --sandbox, the caps and --base-url is "
        "the run's own: a resumed run (--resume RUN) keeps it.",
    )
    add_json(s)
    add_db(s)
    add_workload(s)
    for setting in RUN_FLAGS:
        add_setting(s, setting)
    s.add_argument("--resume", metavar="RUN", help="resume a stopped or killed run (its settings are stored)")
    s.add_argument(
        "--cluster",
        metavar="tcp://HOST:PORT",
        help="run the jobs on this Dask scheduler's workers, each in its own host's sandbox (--sandbox)",
    )
    group = s.add_argument_group("proposer settings (each applies to the proposers that declare it)")
    for setting in proposers.settings():
        add_setting(group, setting)
    s.set_defaults(handler=run, option_flags=True)


def run(args: argparse.Namespace) -> None:
    executor = None
    if args.cluster:
        from search.executors.cluster import connect

        executor = connect(args.cluster)  # unreachable: one line, nothing stored
    try:
        _search(args, executor)
    finally:
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """Every run and proposer setting given on the command line, parsed."""
    from search import proposers
    from search.errors import UserError
    from targets.base import OptionError

    try:
        return given(args, (*SETTINGS, *proposers.settings()))
    except OptionError as exc:
        raise UserError(str(exc)) from None


def _search(args: argparse.Namespace, executor: Executor | None) -> None:
    from search.cli import progress
    from search.cli.render import print_json, show
    from search.cli.report import result, resume_command
    from search.errors import UserError
    from search.proposers.base import ProposerUnavailable
    from search.service import RunService, load_target, open_service, prepare, proposer_for
    from search.settings import RunConfig, target_options

    settings = _settings(args)
    service: RunService
    if args.resume:
        own = [flag for flag, value in (("--workload", args.workload), ("--set", args.assignments)) if value]
        if own or args.extra:
            raise UserError(
                f"{(own or args.extra)[0]} is run {args.resume}'s own setting; a resumed run keeps it "
                "(start a new search to change it)"
            )
        service = open_service(args.db)
        info = service.resume(args.resume, **settings)
        if info.status == "finished" and info.done >= info.budget:
            parsing.note(f"run {info.run_id} is already finished")
        else:
            parsing.note(f"resuming run {info.run_id}: {info.done} of {info.budget} candidates done")
    else:
        target = load_target(args.target)
        options = target_options(target, parsing.option_assignments(args, target))
        config = prepare(args.target, args.workload, options, **settings)
        proposer_for(config, os.environ)  # no key, a bad template, no endpoint: fail before storing anything
        service = open_service(args.db)
        info = service.record(config)
    config = RunConfig.from_json(info.config)
    proposer = proposer_for(config, os.environ)
    backend = config.sandbox if args.sandbox is None else parsing.setting(args, "sandbox")
    sandbox = _sandbox(backend, executor is not None)
    reporter = progress.Bar()
    resume = resume_command(info.run_id, args.db)
    try:
        report = service.execute(info.run_id, sandbox, proposer, reporter, executor)
    except KeyboardInterrupt:
        reporter.stop()
        parsing.fail(f"interrupted; resume with: {resume}", code=130)
    except ProposerUnavailable as exc:
        reporter.stop()
        parsing.fail(f"{exc}; the run is stopped, resume with: {resume}", code=1)
    finally:
        reporter.stop()
    if args.json:
        print_json(report.to_json())
    else:
        show(*result(report, load_target(report.run.target), args.db))
    if report.run.status == "stopped":
        parsing.note(f"run {info.run_id} stopped: {report.run.message}; resume with: {resume}")


def _sandbox(backend: str, on_cluster: bool) -> Any:
    """Where the jobs run: this host's sandbox (said in one line), or each cluster worker's own."""
    if on_cluster:
        from search.executors.cluster import HostSandbox

        return HostSandbox(backend)
    from sandbox.choice import choose_sandbox, notice

    sandbox, reason = choose_sandbox(backend)
    parsing.note(notice(sandbox, reason))
    return sandbox
