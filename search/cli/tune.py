"""`crucible tune`: tune an existing policy's PARAMS and the mechanism's knobs with Optuna, no proposer."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.cli import parsing
from search.cli.parsing import add_db, add_json, add_workload
from search.errors import UserError

if TYPE_CHECKING:
    from rich.console import Console

    from search.tune.study import TuneReport
    from targets.base import Target
    from verifiers.program import Program

DEFAULT_STORAGE = "sqlite:///crucible-tune.db"


def add_parser(sub: Any, name: str, help_text: str) -> None:
    """Register `crucible tune` on the CLI's subparsers."""
    t = parsing.add_command(
        sub,
        name,
        help_text,
        description=(
            "An Optuna study over a policy's PARAMS and its target's tunable options. Each trial is a "
            "sandbox job on the train instances; the best (or the Pareto front) and the policy as "
            "configured are then scored on the eval instances. Rerunning the same command continues "
            "the study; processes sharing --storage together run exactly --trials trials."
        ),
    )
    add_json(t)
    add_db(t)
    add_workload(t, settings=("sandbox",))
    t.add_argument("--policy", required=True, help="a packaged baseline's name or a heuristic file")
    t.add_argument("--trials", type=int, default=30, help="trials the study holds in all (default 30)")
    t.add_argument("--timeout", type=float, help="start no trial after this many seconds")
    t.add_argument("--seed", type=int, default=0, help="the sampler's seed (default 0)")
    t.add_argument(
        "--objective",
        action="append",
        metavar="METRIC[:max|:min]",
        help="repeat for several (NSGA-II, Pareto front); default: the target's objective",
    )
    t.add_argument("--storage", default=DEFAULT_STORAGE, help=f"Optuna RDB URL (default {DEFAULT_STORAGE})")
    t.add_argument("--study", default="", help="study name (default: derived from the settings)")
    t.set_defaults(handler=run, option_flags=True)


def run(args: argparse.Namespace) -> None:
    from rich.console import Console

    from sandbox.choice import choose_sandbox, notice
    from search.service import load_target, open_service
    from search.service.runs import resolve
    from search.settings import target_options
    from search.tune.study import Goal, Study, TuneSpec, tune

    target = load_target(args.target)
    name, source, program = policy(target, args.policy)
    assignments = parsing.option_assignments(args, target)
    workload, options = resolve(target, args.workload, target_options(target, assignments))
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
    service = open_service(args.db)
    sandbox, reason = choose_sandbox(parsing.setting(args, "sandbox"))
    parsing.note(notice(sandbox, reason))
    study = Study(spec, target, program, sandbox, service)
    knobs = ", ".join(f"{k.name} [{k.low:g}, {k.high:g}]" for k in study.knobs) or "none"
    parsing.note(f"study {spec.study_name()} in {spec.storage}; knobs: {knobs}")

    def progress(n: int, total: int, status: str) -> None:
        parsing.note(f"trial {n} here ({len(study.done())}/{total} in the study): {status}")

    try:
        report = tune(study, progress)
    except KeyboardInterrupt:
        parsing.fail(
            f"interrupted; study {spec.study_name()} keeps its {len(study.done())} trials: rerun the same "
            "command to continue it",
            code=130,
        )
    if args.json:
        print(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        show(report, Console())


def policy(target: Target, given: str) -> tuple[str, str, Program]:
    """A packaged baseline by name, else a heuristic file; its name, source and checked program."""
    from verifiers.static import StaticError, check

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


def show(report: TuneReport, console: Console) -> None:
    """The configured policy against the best trial(s) on the eval instances, and the gain."""
    from rich.table import Table

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
        way = "higher" if report.goal(metric)["direction"] == "maximize" else "lower"
        said = f"gain in {metric} ({way} is better): {delta:+.4f}{relative} over the policy as configured"
        console.print(said, highlight=False)
    if not report.front:
        print("no trial gave a value; see `crucible runs show " + report.run_id + "`", file=sys.stderr)


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if float(value).is_integer() and abs(value) >= 10 else f"{value:.4g}"
