"""`crucible tune`: tune an existing policy's PARAMS and the mechanism's knobs with Optuna, no proposer."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from sqlalchemy import Engine

import targets
from sandbox.choice import BACKENDS, choose_sandbox
from search.errors import UserError
from search.service.runs import RunService, load_target, resolve
from search.store.store import DEFAULT_URL, Store, StoreError, open_engine
from search.tune.study import Goal, Study, TuneReport, TuneSpec, tune
from targets.base import Option, OptionError, Target
from verifiers.program import Program
from verifiers.static import StaticError, check

DEFAULT_STORAGE = "sqlite:///crucible-tune.db"


def add_parsers(sub: Any) -> None:
    """Register `crucible tune` on the CLI's subparsers."""
    t = sub.add_parser(
        "tune",
        help="tune a policy's PARAMS and the mechanism's knobs with Optuna (no proposer)",
        description=(
            "An Optuna study over a policy's PARAMS and its target's tunable options. Each trial is a "
            "sandbox job on the train instances; the best (or the Pareto front) and the policy as "
            "configured are then scored on the eval instances. Rerunning the same command continues "
            "the study; processes sharing --storage together run exactly --trials trials."
        ),
    )
    t.add_argument("--target", default="kv", help=f"one of {', '.join(targets.names())}")
    t.add_argument("--policy", required=True, help="a packaged baseline's name or a heuristic file")
    t.add_argument("--workload", help="trace file or generator spec (default: the shipped workload)")
    t.add_argument("--set", dest="settings", action="append", default=[], metavar="NAME=VALUE")
    t.add_argument("--trials", type=int, default=30, help="trials the study holds in all (default 30)")
    t.add_argument("--timeout", type=float, help="start no trial after this many seconds")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument(
        "--objective",
        action="append",
        metavar="METRIC[:max|:min]",
        help="repeat for several (NSGA-II, Pareto front); default: the target's objective",
    )
    t.add_argument("--storage", default=DEFAULT_STORAGE, help=f"Optuna RDB URL (default {DEFAULT_STORAGE})")
    t.add_argument("--study", default="", help="study name (default: derived from the settings)")
    t.add_argument("--sandbox", default="auto", choices=BACKENDS)
    t.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    t.add_argument("--db", default=DEFAULT_URL, help=f"run store URL (default {DEFAULT_URL})")


def run(args: argparse.Namespace) -> None:
    target = load_target(args.target)
    name, source, program = policy(target, args.policy)
    workload, options = resolve(target, args.workload, given_options(target, args.settings))
    goals = tuple(Goal.parse(text, target) for text in args.objective or [target.objective.metric])
    if len({g.metric for g in goals}) != len(goals):
        raise UserError("--objective: each metric once")
    if args.timeout is not None and not args.timeout > 0:
        raise UserError(f"--timeout must be positive, got {args.timeout}")
    spec = TuneSpec(
        target=target.name,
        policy=name,
        source=source,
        workload=workload,
        options=options,
        goals=goals,
        trials=args.trials,
        seed=args.seed,
        timeout_s=args.timeout,
        storage=args.storage,
        study=args.study,
    )
    err = Console(stderr=True)
    service = RunService(Store(shared_store(args.db)))
    sandbox, reason = choose_sandbox(args.sandbox)
    err.print(f"sandbox: {sandbox.name} ({reason})", markup=False, highlight=False, soft_wrap=True)
    study = Study(spec, target, program, sandbox, service)
    knobs = ", ".join(f"{k.name} [{k.low:g}, {k.high:g}]" for k in study.knobs) or "none"
    err.print(f"study {spec.study_name()} in {spec.storage}; knobs: {knobs}", markup=False, highlight=False)

    def progress(n: int, total: int, status: str) -> None:
        err.print(f"trial {n} here ({len(study.done())}/{total} in the study): {status}", markup=False)

    report = tune(study, progress)
    if args.json:
        print(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        show(report, Console())


def shared_store(url: str, attempts: int = 5) -> Engine:
    """The run store, which processes of one study may be first to make at the same moment: the losers of
    that race (its tables made by another process meanwhile) open it again."""
    for attempt in range(attempts):
        try:
            return open_engine(url)
        except StoreError:
            if attempt + 1 == attempts:
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def policy(target: Target, given: str) -> tuple[str, str, Program]:
    """A packaged baseline by name, else a heuristic file; its name, source and checked program."""
    baselines = target.baselines()
    if given in baselines:
        name, source = given, baselines[given]
    else:
        path = Path(given)
        if not path.is_file():
            known = ", ".join(baselines)
            raise UserError(f"--policy {given!r} is neither a baseline of {target.name} ({known}) nor a file")
        try:
            source = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"cannot read {path}: {exc}") from None
        name = path.stem
    try:
        return name, source, check(source, target.signatures)
    except StaticError as exc:
        raise UserError(f"{given}: {exc}") from None


def given_options(target: Target, settings: list[str]) -> dict[str, Any]:
    """The --set values, each parsed by the target's Option; one line naming a bad one."""
    known: dict[str, Option] = {o.name: o for o in target.options}
    given: dict[str, Any] = {}
    for pair in settings:
        name, sep, text = pair.partition("=")
        if not sep or name.strip() not in known:
            raise UserError(f"--set {pair!r}: expected NAME=VALUE with NAME one of {', '.join(known)}")
        try:
            given[name.strip()] = known[name.strip()].parse(text)
        except OptionError as exc:
            raise UserError(str(exc)) from None
    return given


def show(report: TuneReport, console: Console) -> None:
    """The configured policy against the best trial(s) on the eval instances, and the gain."""
    metrics = [g["metric"] for g in report.goals]
    table = Table(title=f"{report.policy} on {report.target}: study {report.study} (run {report.run_id})")
    for column in ("point", *[k["name"] for k in report.knobs], *metrics):
        table.add_column(column, justify="left" if column == "point" else "right")

    def row(label: str, values: dict[str, float], scored: dict[str, float] | None) -> None:
        knobs = [_number(values.get(k["name"])) for k in report.knobs]
        figures = [(scored or {}).get(m) for m in metrics]
        table.add_row(label, *knobs, *("-" if f is None else f"{f:.4f}" for f in figures))

    row("as configured", report.configured.values, report.configured.eval)
    for point in report.front:
        row(f"trial {point.number}", point.values, point.eval)
    console.print(table)
    front = "Pareto front" if len(metrics) > 1 else "best trial"
    console.print(
        f"{report.trials_done} of {report.trials_requested} trials in the study "
        f"({report.trials_here} run here); {front} scored on the eval instances",
        highlight=False,
    )
    for metric, delta in report.gain.items():
        before = (report.configured.eval or {}).get(metric)
        relative = f" ({delta / abs(before):+.1%})" if before else ""
        console.print(
            f"gain in {metric}: {delta:+.4f}{relative} over the policy as configured", highlight=False
        )
    if not report.front:
        print("no trial gave a value; see `crucible runs show " + report.run_id + "`", file=sys.stderr)


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if float(value).is_integer() and abs(value) >= 10 else f"{value:.4g}"
