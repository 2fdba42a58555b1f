"""The `crucible` command line: search, baselines, eval, verify, runs, targets; results on stdout, progress
on stderr. A thin client of the run service (search/service.py): `--json` prints the read model's data."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import asdict
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import targets
from sandbox.base import Sandbox, SandboxUnavailable
from sandbox.choice import BACKENDS, choose_sandbox, notice
from sandbox.job import Tuning
from targets.base import Objective, Option, OptionError, Target, WorkloadError
from verifiers.static import StaticError

from . import export_command, kernel_commands, sandbox_commands, target_commands, tune_command, ui_command
from .ci import command as ci_command
from .errors import UserError
from .evaluation import checked, evaluate_baselines, evaluate_file, plan, read_program, verify
from .executors.cluster import HostSandbox, connect
from .loop import Reporter, RunConfig
from .proposers.base import ProposerUnavailable
from .proposers.llm import DEFAULT_KEY_ENV, LLMConfig, ModelChoice, Price
from .readmodel import Budget, HoldoutReport, ProposerStats, ReadModel, RunInfo, RunReport, StudyReport
from .selection import CHOICES as SELECT_CHOICES
from .service import RunService, load_target, prepare, proposer_for
from .store import DEFAULT_URL, Store, StoreError, open_engine

_err = Console(stderr=True)


def _fail(message: str, code: int = 2) -> NoReturn:
    print(f"crucible: error: {' '.join(message.split())}", file=sys.stderr)
    raise SystemExit(code)


def _warn(message: str) -> None:
    print(f"crucible: warning: {' '.join(message.split())}", file=sys.stderr)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, except where there is none to show or the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text:
            return text
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """A mistake on the command line is one line and a pointer to --help, not the whole usage."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        _fail(f"{message} (see {self.prog} --help)")


def _version() -> str:
    try:
        return version("crucible")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _options_epilog() -> str:
    lines = ["target options (--set NAME=VALUE; `crucible targets show TARGET` for types, bounds, docs):"]
    for name in targets.names():
        lines.append(f"  {name}: {', '.join(o.name for o in targets.load(name).options) or 'none'}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="crucible",
        description="Synthesize and autotune systems heuristics: search, evaluate, verify, inspect runs.",
    )
    parser.add_argument("--version", action="version", version=f"crucible {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
        p.add_argument("--db", default=DEFAULT_URL, help="store URL (SQLite or PostgreSQL)")

    def workload(p: argparse.ArgumentParser) -> None:
        p.add_argument("--target", default="kv", choices=targets.names(), help="the mechanism to work on")
        p.add_argument(
            "--workload",
            help="trace file (a relative path is taken from here) or gen:<kind>:<seed>; "
            "default: the target's shipped workload",
        )
        p.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            dest="settings",
            help="a target option; repeatable (see below)",
        )
        p.add_argument(
            "--capacity", type=int, help="shorthand for --set capacity=N (cache capacity in blocks)"
        )
        p.add_argument("--sandbox", default="auto", choices=BACKENDS, help="where candidate code runs")
        p.add_argument("--workers", type=int, default=2, help="candidate jobs run side by side")

    epilog = _options_epilog()
    raw = argparse.RawDescriptionHelpFormatter
    s = sub.add_parser("search", help="search for a better heuristic", epilog=epilog)
    s.formatter_class = type("_SearchHelp", (_HelpFormatter, raw), {})
    common(s)
    workload(s)
    s.add_argument("--budget", type=int, default=300, help="candidates to propose")
    s.add_argument("--time-budget", type=float, default=None, help="stop (resumably) after this many seconds")
    s.add_argument("--seed", type=int, default=0, help="seed of the whole run: the same seed, the same run")
    s.add_argument("--trials", type=int, default=32, help="Optuna trials per candidate")
    s.add_argument(
        "--proposer", default="evolve", choices=("evolve", "llm", "mix"), help="who writes candidates"
    )
    s.add_argument("--resume", metavar="RUN", help="resume a stopped or killed run (its settings are stored)")
    s.add_argument(
        "--cluster",
        metavar="tcp://HOST:PORT",
        help="run the jobs on this Dask scheduler's workers, each in its own host's sandbox (--sandbox)",
    )
    s.add_argument("--max-cost-usd", type=float, help="stop (resumably) once proposals cost this much")
    s.add_argument("--max-tokens", type=int, help="stop (resumably) once proposals used this many tokens")
    s.add_argument(
        "--holdout",
        metavar="SHARE",
        help="hold out this share of the workload's requests, the last in time (e.g. 0.33): tune and select "
        "on the head, then report the best and the baselines on the tail, as tuned and re-tuned there",
    )
    s.add_argument(
        "--select",
        choices=SELECT_CHOICES,
        help="what candidates are ranked on: the whole window (the default without --holdout), or 'unseen', "
        "the window after the train share their constants were tuned on, replayed warm where the target can "
        "(the default with --holdout)",
    )
    llm = s.add_argument_group("LLM proposer (--proposer llm or mix)")
    llm.add_argument(
        "--model",
        action="append",
        metavar="NAME[:WEIGHT]",
        help="a model to ask; repeat to mix models by weight",
    )
    llm.add_argument(
        "--base-url", help="OpenAI-compatible endpoint (default: OpenAI), e.g. http://localhost:8000/v1"
    )
    llm.add_argument(
        "--api-key-env", default=DEFAULT_KEY_ENV, metavar="VAR", help="variable holding the API key"
    )
    llm.add_argument("--llm-timeout", type=float, default=120.0, metavar="S", help="seconds per call")
    llm.add_argument("--llm-retries", type=int, default=2, help="client retries of 429, 5xx, timeouts")
    llm.add_argument("--llm-concurrency", type=int, default=4, help="calls in flight at most")
    llm.add_argument("--temperature", type=float, help="sampling temperature (default: the server's)")
    llm.add_argument(
        "--price",
        action="append",
        metavar="MODEL=PROMPT,COMPLETION",
        help="USD per million tokens; repeatable",
    )
    llm.add_argument("--prompts", metavar="DIR", help="folder of prompt templates replacing the shipped ones")
    llm.add_argument(
        "--llm-share", type=float, default=0.25, help="share of LLM proposals under --proposer mix"
    )

    b = sub.add_parser("baselines", help="evaluate the target's baselines on a workload", epilog=epilog)
    b.formatter_class = s.formatter_class
    common(b)
    workload(b)

    e = sub.add_parser(
        "eval",
        help="evaluate a heuristic file on a workload",
        description="Evaluate a heuristic file on a workload. Its properties are checked with Z3 first: "
        "a refuted hard property is a warning (the file is evaluated anyway, exit 0); "
        "`crucible verify` is the check that fails.",
        epilog=epilog,
    )
    e.formatter_class = s.formatter_class
    common(e)
    workload(e)
    e.add_argument("file", help="the heuristic file (a candidate module)")
    e.add_argument("--tune", action="store_true", help="tune PARAMS again on this workload")
    e.add_argument("--trials", type=int, default=16, help="Optuna trials with --tune")
    e.add_argument("--seed", type=int, default=0, help="seed of the tuning with --tune")

    v = sub.add_parser("verify", help="prove a heuristic's properties with Z3 (exit 1 if a hard one fails)")
    v.add_argument("file", nargs="?", help="the heuristic file (or --run and --candidate)")
    v.add_argument("--target", default="kv", choices=targets.names(), help="whose properties to prove")
    v.add_argument("--seconds", type=float, default=2.0, help="Z3's time limit per property")
    v.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    v.add_argument("--db", default=DEFAULT_URL, help="store URL, to verify a stored candidate")
    v.add_argument("--run", help="verify a candidate of this stored run (with --candidate)")
    v.add_argument("--candidate", type=int, help="the stored candidate's id (as `runs show` prints it)")

    r = sub.add_parser("runs", help="inspect stored runs")
    rsub = r.add_subparsers(dest="runs_command", required=True, metavar="ACTION")
    common(rsub.add_parser("list", help="all runs"))
    show = rsub.add_parser("show", help="one run")
    common(show)
    show.add_argument("run", help="the run's id (a unique prefix will do)")
    best = rsub.add_parser("best", help="write the best heuristic of a run as a self-contained file")
    common(best)
    best.add_argument("run", help="the run's id (a unique prefix will do)")
    best.add_argument("--output", "-o", help="file to write (default: stdout); with --export, a folder")
    export_command.add_options(best, flag="--export")
    stop = rsub.add_parser("stop", help="stop a run resumably (its live search is interrupted)")
    common(stop)
    stop.add_argument("run", help="the run's id (a unique prefix will do)")

    t = sub.add_parser("targets", help="the targets: their options, features, metrics and baselines")
    tsub = t.add_subparsers(dest="targets_command", required=True, metavar="ACTION")
    tl = tsub.add_parser("list", help="every target")
    tl.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    ts = tsub.add_parser("show", help="one target: options, features, metrics, baselines")
    ts.add_argument("target", choices=targets.names(), help="the target")
    ts.add_argument("--json", action="store_true", help="machine-readable result on stdout")

    kernel_commands.add_parsers(sub)
    sandbox_commands.add_parsers(sub)
    target_commands.add_parsers(sub)
    ui_command.add_parsers(sub)
    tune_command.add_parsers(sub)
    ci_command.add_parsers(sub)
    export_command.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    try:
        args = _parser().parse_args(argv)
    except targets.TargetUnavailable as exc:  # the parser lists every target's options: a broken one stops it
        _fail(str(exc), code=1)
    try:
        handler = {
            "search": _search,
            "baselines": _baselines,
            "eval": _eval,
            "runs": _runs,
            "verify": _verify,
            "targets": _targets,
            "profile": kernel_commands.profile,
            "validate": kernel_commands.validate,
            "sandbox": sandbox_commands.sandbox,
            **target_commands.handlers(),
            "ui": ui_command.ui,
            "tune": tune_command.run,
            "ci": ci_command.run,
            "export": export_command.run,
        }[args.command]
        handler(args)
    except (UserError, WorkloadError, OptionError, StoreError, StaticError, SandboxUnavailable) as exc:
        _fail(str(exc))
    except ProposerUnavailable as exc:
        _fail(str(exc), code=1)
    except KeyboardInterrupt:
        _fail("interrupted", code=130)
    except OSError as exc:
        _fail(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc), code=1)


def _service(args: argparse.Namespace) -> RunService:
    """A service on the store; it is created if missing (a search writes)."""
    return RunService(Store(open_engine(args.db)))


def _reader(args: argparse.Namespace) -> ReadModel:
    """The read model on an existing store: a mistyped --db is an error, never a new empty database."""
    return ReadModel(Store(open_engine(args.db, create=False)))


def _given_options(target: Target, args: argparse.Namespace) -> dict[str, Any]:
    """The --set values (and --capacity), each parsed by the target's Option; one line naming a bad one."""
    known = {o.name: o for o in target.options}
    given: dict[str, Any] = {}
    pairs = list(args.settings) + ([f"capacity={args.capacity}"] if args.capacity is not None else [])
    for pair in pairs:
        name, sep, text = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UserError(f"--set expects NAME=VALUE, got {pair!r}")
        if name not in known:
            raise UserError(
                f"unknown option {name!r} for target {target.name}; options: {', '.join(known) or 'none'}"
            )
        given[name] = _parse(known[name], text)
    return given


def _parse(option: Option, text: str) -> Any:
    try:
        return option.parse(text)
    except OptionError as exc:
        message = str(exc)
        allowed = option.allowed()
        raise UserError(message if allowed in message else f"{message}; allowed: {allowed}") from None


def _sandbox(args: argparse.Namespace) -> Sandbox:
    sandbox, reason = choose_sandbox(args.sandbox)
    print(notice(sandbox, reason), file=sys.stderr, flush=True)  # one plain line, never wrapped
    return sandbox


def _llm_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The LLM flags as stored in the run's config; empty for the offline proposer."""
    if args.proposer == "evolve":
        if args.model:
            raise UserError("--model applies to --proposer llm or mix")
        return {}
    try:
        settings = LLMConfig(
            models=tuple(ModelChoice.parse(spec) for spec in args.model or ()),
            base_url=args.base_url,
            api_key_env=args.api_key_env,
            timeout_s=args.llm_timeout,
            retries=args.llm_retries,
            concurrency=args.llm_concurrency,
            temperature=args.temperature,
            prices=dict(Price.parse(spec) for spec in args.price or ()),
            prompts=str(Path(args.prompts).resolve()) if args.prompts else None,
            share=args.llm_share,
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None
    unpriced = settings.unpriced()
    if unpriced and args.max_cost_usd is not None:
        raise UserError(f"--max-cost-usd needs a --price for every model; none for {', '.join(unpriced)}")
    if unpriced:
        message = f"no --price for {', '.join(unpriced)}: tokens are counted, cost as $0"
        _err.print(message, markup=False, highlight=False, soft_wrap=True)
    return settings.to_json()


class _Progress(Reporter):
    def __init__(self, console: Console) -> None:
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("best {task.fields[best]}"),
            console=console,
            transient=False,
        )
        self.task: Any = None

    def started(self, run_id: str, done: int, budget: int) -> None:
        self.progress.start()
        self.task = self.progress.add_task(f"run {run_id}", total=budget, completed=done, best="-")

    def candidate(self, done: int, budget: int, best: float | None, status: str) -> None:
        shown = "-" if best is None else f"{best:.4f}"
        self.progress.update(self.task, completed=done, best=shown)

    def note(self, message: str) -> None:
        self.progress.console.print(message, markup=False, highlight=False)

    def stop(self) -> None:
        self.progress.stop()


def _search(args: argparse.Namespace) -> None:
    executor = connect(args.cluster) if args.cluster else None  # unreachable: one line, nothing stored
    try:
        _search_on(args, executor)
    finally:
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)


def _search_on(args: argparse.Namespace, executor: Executor | None) -> None:
    if args.resume:
        service = _service(args)
        info = service.resume(
            args.resume, max_cost_usd=args.max_cost_usd, max_tokens=args.max_tokens, base_url=args.base_url
        )
        if info.status == "finished":
            _err.print(f"run {info.run_id} is already finished", markup=False)
        else:
            note = f"resuming run {info.run_id}: {info.done} of {info.budget} candidates done"
            _err.print(note, markup=False, highlight=False)
    else:
        target = load_target(args.target)
        config = prepare(
            args.target,
            args.workload,
            _given_options(target, args),
            budget=args.budget,
            seed=args.seed,
            trials=args.trials,
            workers=args.workers,
            proposer=args.proposer,
            time_budget_s=args.time_budget,
            llm=_llm_settings(args),
            max_cost_usd=args.max_cost_usd,
            max_tokens=args.max_tokens,
            holdout=args.holdout,
            select=args.select,
        )
        proposer_for(config, os.environ)  # no key, a bad template, no endpoint: fail before storing anything
        service = _service(args)
        info = service.record(config)
    proposer = proposer_for(RunConfig.from_json(info.config), os.environ)
    sandbox = HostSandbox(args.sandbox) if executor is not None else _sandbox(args)
    reporter = _Progress(_err)
    resume = f"crucible search --resume {info.run_id} --db {args.db}"
    try:
        report = service.execute(info.run_id, sandbox, proposer, reporter, executor)
    except KeyboardInterrupt:
        reporter.stop()
        _fail(f"interrupted; resume with: {resume}", code=130)
    except ProposerUnavailable as exc:
        reporter.stop()
        _fail(f"{exc}; the run is stopped, resume with: {resume}", code=1)
    finally:
        reporter.stop()
    target = load_target(report.run.target)
    if args.json:
        _print_json(report.to_json())
    else:
        _print_result(report, target)
    if report.run.status == "stopped":
        message = f"run {info.run_id} stopped: {report.run.message}; resume with: {resume}"
        _err.print(message, markup=False, highlight=False, soft_wrap=True)


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


def _print(*renderables: RenderableType | str) -> None:
    """Print to stdout; piped output is as wide as its widest table, so no column is ever cut."""
    console = Console()
    if not console.is_terminal:
        wide = Console(width=100_000)
        widths = [wide.measure(r).maximum for r in renderables if not isinstance(r, str)]
        console = Console(width=max([80, *widths]))
    for r in renderables:
        if isinstance(r, str):
            console.print(r, markup=False, highlight=False, soft_wrap=True)
        else:
            console.print(r)


def _print_result(report: RunReport, target: Target) -> None:
    rows: dict[str, dict[str, float]] = {}
    if report.best:
        rows[f"found #{report.best.candidate_id}"] = report.best.metrics
    rows.update(report.baseline_metrics())
    lines: list[RenderableType | str] = [
        _table(f"run {report.run.run_id} ({report.run.status})", rows, target, _objective(report))
    ]
    if report.best and report.best.score:
        lines.append(_ratios(report))
    if report.holdout:
        lines.append(_holdout_table(report.holdout, report.run.objective))
    if report.study:
        lines.append(_study_table(report.study))
    if report.run.tokens or report.run.cost_usd:
        lines.append(f"proposals used {report.run.tokens} tokens, ${report.run.cost_usd:.4f}")
    if report.best:
        lines.append(f"best heuristic: crucible runs best {report.run.run_id} --output best.py")
    _print(*lines)


def _objective(report: RunReport) -> Objective:
    """What the run's scores measure (a tune study's first objective, else the target's)."""
    return Objective(report.run.objective, report.run.direction)  # type: ignore[arg-type]


def _ratios(report: RunReport) -> str:
    """The found candidate's objective as a multiple of each baseline's (a baseline at 0 left out), the
    oracles apart: they are the bound, not baselines to beat."""
    assert report.best is not None and report.best.score is not None
    metric, found = report.run.objective, report.best.score

    def ratios(oracle: bool) -> str:
        kept = [b for b in report.baselines if b.score and b.oracle == oracle]
        scores = sorted(((b.score, b.name) for b in kept), reverse=True)
        return ", ".join(f"{name} {found / score:.3f}x" for score, name in scores)

    found_name = f"found #{report.best.candidate_id}"
    line = f"{metric} ({report.run.direction}) of {found_name} against each baseline: {ratios(False)}"
    bound = ratios(True)
    return f"{line}; against the oracle: {bound}" if bound else line


def _holdout_table(holdout: HoldoutReport, metric: str) -> Table:
    """Each policy's objective on the head it was selected on, and on the held-out tail."""
    table = Table(title=f"{metric}, held-out tail")
    table.add_column("policy")
    tail = f"tail {holdout.tail}" + (" warm" if holdout.warm else "")
    for name in (holdout.head_label(), tail, "tail re-tuned", "found / this, tail"):
        table.add_column(name, justify="right")
    found = holdout.found_tail()
    for row in holdout.rows:
        cells = (row.head, row.tail, row.tail_retuned)
        ratio = f"{found / row.tail:.3f}" if found is not None and row.tail else "-"
        name = f"{row.name} (oracle)" if row.oracle else row.name
        table.add_row(name, *("-" if c is None else f"{c:.4f}" for c in cells), ratio)
    return table


def _study_table(study: StudyReport) -> Table:
    """A tune study's front, best first by its first objective: knobs, and each objective on train and
    on eval; the policy as configured first (eval only)."""
    knobs = sorted({k for p in study.points for k in p.values} | set(study.configured_values))
    table = Table(title=f"study {study.study}: Pareto front of {len(study.points)} trials")
    for column in ("point", *knobs, *(f"{m} ({r})" for r in ("train", "eval") for m in study.objectives)):
        table.add_column(column, justify="left" if column == "point" else "right")

    def row(
        name: str, values: Mapping[str, float], train: Mapping[str, float], held: Mapping[str, float]
    ) -> None:
        figures = [f.get(m) for f in (train, held) for m in study.objectives]
        table.add_row(
            name, *(f"{values[k]:.6g}" if k in values else "-" for k in knobs),
            *("-" if f is None else f"{f:.4f}" for f in figures),
        )  # fmt: skip

    row("as configured", study.configured_values, {}, study.configured)
    for point in study.front():
        row(f"trial {point.trial}", point.values, point.train, point.eval)
    return table


def _cell(value: float, integer: bool) -> str:
    return f"{value:.0f}" if integer else f"{value:.4f}"


def _table(
    title: str, rows: Mapping[str, Mapping[str, float]], target: Target, objective: Objective | None = None
) -> Table:
    """Every policy's report metrics, best first by `objective` (the target's unless given)."""
    metric = (objective or target.objective).metric
    maximize = (objective or target.objective).direction == "maximize"
    whole = set(target.integer_metrics)
    table = Table(title=title)
    table.add_column("policy")
    columns = target.report_metrics
    for name in columns:
        table.add_column(name, justify="right")
    ordered = sorted(rows.items(), key=lambda kv: kv[1].get(metric, 0.0), reverse=maximize)
    for name, metrics in ordered:
        table.add_row(name, *(_cell(metrics[c], c in whole) if c in metrics else "-" for c in columns))
    return table


def _workload_and_options(args: argparse.Namespace) -> tuple[Target, str | None, dict[str, Any]]:
    target = load_target(args.target)
    return target, args.workload, _given_options(target, args)


def _baselines(args: argparse.Namespace) -> None:
    target, workload, options = _workload_and_options(args)
    planned = plan(target, workload, options)
    table = evaluate_baselines(target, planned, _sandbox(args), args.workers)
    if args.json:
        _print_json(table.to_json())
    else:
        _print(_table(f"baselines on {table.instance}", table.baselines, target))


def _eval(args: argparse.Namespace) -> None:
    target, workload, options = _workload_and_options(args)
    program = read_program(target, Path(args.file))
    tuning = Tuning(trials=args.trials, seed=args.seed) if args.tune else None
    planned = plan(target, workload, options)
    done = evaluate_file(target, args.file, program, planned, _sandbox(args), tuning)
    for verdict in done.refuted:
        cex = json.dumps(verdict.counterexample, sort_keys=True) if verdict.counterexample else ""
        _warn(f"{args.file} fails the hard property {verdict.property}: {verdict.message} {cex}".rstrip())
    if args.json:
        _print_json(done.to_json())
        return
    shown = {Path(args.file).stem: done.metrics}
    lines: list[RenderableType | str] = [_table(f"{Path(args.file).name} on {done.instance}", shown, target)]
    if done.params:
        lines.append(f"params: {json.dumps(done.params, sort_keys=True)}")
    _print(*lines)


def _runs(args: argparse.Namespace) -> None:
    read = _reader(args)
    if args.runs_command == "list":
        runs = read.runs()
        if args.json:
            _print_json([r.to_json() for r in runs])
            return
        _print(_runs_table(runs, args.db))
        return
    if args.runs_command == "stop":
        service = RunService(read.store)
        service.stop(args.run)
        info = read.run(args.run)
        if args.json:
            _print_json(info.to_json())
        else:
            _err.print(f"run {info.run_id}: {_status(info)}", markup=False, highlight=False)
        return
    if args.runs_command == "show":
        report = read.report(args.run)
        if args.json:
            _print_json(report.to_json())
        else:
            _show(report)
        return
    info = read.run(args.run)
    text = read.best_file(info.run_id)
    best = read.best(info.run_id)
    assert best is not None
    if args.engine:
        args.target = args.target or info.target
        export_command.write(text, f"run {info.run_id} (candidate #{best.candidate_id})", info.run_id, args)
        return
    if args.json:
        _print_json({**best.to_json(), "run_id": info.run_id, "file": text})
    elif args.output:
        Path(args.output).write_text(text)
        _err.print(f"wrote {args.output} (candidate #{best.candidate_id})", markup=False)
    else:
        sys.stdout.write(text)


def _status(info: RunInfo) -> str:
    if info.status == "interrupted":
        return f"interrupted (resume with: crucible search --resume {info.run_id})"
    return info.status


def _runs_table(runs: Sequence[RunInfo], db: str) -> Table:
    table = Table(title=f"runs in {db}")
    for col in ("run", "target", "status", "created", "candidates", "best", "best baseline"):
        table.add_column(col, justify="right" if col in ("candidates", "best") else "left")
    for r in runs:
        best = "-" if r.best is None else f"{r.best.score:.4f}"
        baseline = "-"
        if r.best_baseline is not None and r.best_baseline.score is not None:
            baseline = f"{r.best_baseline.name} {r.best_baseline.score:.4f}"
        table.add_row(
            r.run_id,
            r.target,
            _status(r),
            r.created_at[:16].replace("T", " "),
            f"{r.done}/{r.budget}",
            best,
            baseline,
        )
    return table


def _stats_table(stats: Sequence[ProposerStats]) -> Table:
    table = Table(title="by proposer and model")
    columns = (
        "proposer",
        "model",
        "proposals",
        "failed",
        "rejected",
        "ran",
        "improved",
        "best",
        "tokens",
        "cost",
    )
    for name in columns:
        table.add_column(name, justify="left" if name in ("proposer", "model") else "right")
    for s in stats:
        best = "-" if s.best is None else f"{s.best:.4f}"
        table.add_row(
            s.proposer,
            s.model or "-",
            *(str(n) for n in (s.proposals, s.failed, s.rejected, s.ran, s.improved)),
            best,
            str(s.tokens),
            f"${s.cost_usd:.4f}",
        )
    return table


def _show(report: RunReport) -> None:
    info = report.run
    target = load_target(info.target)
    lines: list[RenderableType | str] = [
        f"run {info.run_id}: {_status(info)} {info.message}".rstrip(),
        f"config: {json.dumps(info.config, sort_keys=True)}",
        f"candidates: {json.dumps(info.counts, sort_keys=True)}",
    ]
    if report.budget:
        lines.append(_budget_line(report.budget))
    if report.failures:
        lines.append(f"failed, by class: {json.dumps(report.failures, sort_keys=True)}")
    refuted = report.verification.rejected_by_property
    if refuted:
        lines.append(f"rejected by property: {json.dumps(refuted, sort_keys=True)}")
    if report.proposers:
        lines.append(_stats_table(report.proposers))
    _print(*lines)
    _print_result(report, target)


def _budget_line(b: Budget) -> str:
    """Where the proposals went, in one line: discarded, stopped before the sandbox, run."""
    return (
        f"budget: {b.duplicates} duplicates and {b.failed_proposals} failed proposals discarded; "
        f"{b.static} rejected by the static check, {b.refuted} refuted by the verifier, "
        f"{b.behaved_alike} behaved as an evaluated program (not tuned), {b.faulted} failed in the sandbox, "
        f"{b.gated} gated by the cascade, {b.evaluated} evaluated"
        + (f", {b.pending} pending" if b.pending else "")
    )


def _verify(args: argparse.Namespace) -> None:
    target = load_target(args.target)
    if not args.seconds > 0:
        raise UserError(f"--seconds must be positive, got {args.seconds}")
    if args.file and (args.run or args.candidate is not None):
        raise UserError("give a file, or --run and --candidate, not both")
    if args.file:
        name = args.file
        program = read_program(target, Path(args.file))
    elif args.run and args.candidate is not None:
        read = _reader(args)
        run = read.run(args.run)
        stored = read.candidate(run.run_id, args.candidate)
        target = load_target(run.target)
        name = f"run {run.run_id} candidate #{stored.candidate_id}"
        program = checked(target, stored.source, name)
    else:
        raise UserError("verify needs a file, or --run RUN and --candidate ID")
    outcomes = verify(target, program, args.seconds)
    properties = {p.name: p for p in target.properties()}
    if args.json:
        rows = [
            {
                **asdict(o),
                "statement": properties[o.property].statement,
                "kind": properties[o.property].kind,
            }
            for o in outcomes
        ]
        _print_json({"file": name, "target": target.name, "properties": rows})
    else:
        table = Table(title=f"{Path(name).name if args.file else name} on {target.name}")
        for column in ("property", "severity", "verdict", "seconds", "statement"):
            table.add_column(column, justify="right" if column == "seconds" else "left")
        for o in outcomes:
            statement = properties[o.property].statement
            table.add_row(o.property, o.severity, o.verdict, f"{o.seconds:.3f}", statement)
        lines: list[RenderableType | str] = [table]
        lines += [f"{o.property} ({o.verdict}): {o.message}" for o in outcomes if o.message]
        _print(*lines)  # whole lines, so a counterexample can be copied
    if any(o.severity == "hard" and o.verdict == "counterexample" for o in outcomes):
        raise SystemExit(1)


def _targets(args: argparse.Namespace) -> None:
    if args.targets_command == "list":
        found = [load_target(name) for name in targets.names()]
        rows = [
            {
                "name": t.name,
                "objective": t.objective.metric,
                "direction": t.objective.direction,
                "description": t.description,
            }
            for t in found
        ]
        if args.json:
            _print_json(rows)
            return
        table = Table(title="targets")
        for col in ("name", "objective", "options", "about"):
            table.add_column(col)
        for t in found:
            table.add_row(
                t.name,
                f"{t.objective.direction} {t.objective.metric}",
                ", ".join(o.name for o in t.options),
                t.description.split(". ")[0],
            )
        _print(table, "crucible targets show TARGET: its options, features, metrics and baselines")
        return
    target = load_target(args.target)
    data = _target_json(target)
    if args.json:
        _print_json(data)
        return
    options = Table(title=f"{target.name} options (--set NAME=VALUE)")
    for col in ("option", "type", "default", "allowed", "about"):
        options.add_column(col)
    for o in data["options"]:
        default = "-" if o["default"] is None else str(o["default"])
        options.add_row(o["name"], o["type"], default, o["allowed"], o["doc"])
    features = Table(title=f"{target.name} features")
    for col in ("function", "feature", "unit", "range", "about"):
        features.add_column(col)
    for s in target.signatures:
        for f in target.registry(s.name).features:
            features.add_row(s.name, f.name, f.shown_unit, f"[{f.low:g}, {f.high:g}]", f.doc)
    objective = data["objective"]
    _print(
        target.description,
        options,
        features,
        f"objective: {objective['direction']} {objective['metric']}",
        f"metrics shown: {', '.join(data['metrics'])}",
        f"baselines: {', '.join(data['baselines'])}",
        f"built-in baselines: {', '.join(data['builtin_baselines']) or 'none'}",
        f"oracles (read the future; a bound, not a baseline to beat): {', '.join(data['oracles']) or 'none'}",
    )


def _target_json(target: Target) -> dict[str, Any]:
    return {
        "name": target.name,
        "description": target.description,
        "objective": {"metric": target.objective.metric, "direction": target.objective.direction},
        "metrics": list(target.report_metrics),
        "integer_metrics": list(target.integer_metrics),
        "options": [
            {
                "name": o.name,
                "type": o.type,
                "default": o.default,
                "doc": o.doc,
                "low": o.low,
                "high": o.high,
                "choices": list(o.choices),
                "allowed": o.allowed(),
            }
            for o in target.options
        ],
        "features": {
            s.name: [
                {"name": f.name, "unit": f.unit, "low": f.low, "high": f.high, "clock": f.clock, "doc": f.doc}
                for f in target.registry(s.name).features
            ]
            for s in target.signatures
        },
        "baselines": list(target.baselines()),
        "builtin_baselines": list(target.builtin_baselines()),
        "oracles": list(target.oracles()),
        "commands": [c.name for c in target.commands()],
    }


if __name__ == "__main__":
    main()
