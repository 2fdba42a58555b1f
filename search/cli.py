"""The `crucible` command line: search, baselines, eval, runs; results on stdout, progress on stderr."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import targets
from sandbox.base import Sandbox, SandboxUnavailable
from sandbox.choice import BACKENDS, choose_sandbox
from sandbox.job import Job, Tuning
from targets.base import Target, WorkloadError
from verifiers.smt import Verifier
from verifiers.static import StaticError, check, render

from . import kernel_commands
from .loop import BASELINE, Reporter, RunConfig, Search, Summary, domains, summarize
from .proposers.base import Proposer
from .proposers.evolve import EvolveProposer
from .store import DEFAULT_URL, Store, StoreError, open_engine

_err = Console(stderr=True)


class UserError(Exception):
    """A mistake the user can fix; printed as one line, exit status 2."""


def _fail(message: str, code: int = 2) -> NoReturn:
    print(f"crucible: error: {' '.join(message.split())}", file=sys.stderr)
    raise SystemExit(code)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crucible", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
        p.add_argument("--db", default=DEFAULT_URL, help=f"store URL (default {DEFAULT_URL})")

    def workload(p: argparse.ArgumentParser) -> None:
        p.add_argument("--target", default="kv", choices=targets.names())
        p.add_argument("--workload", help="trace file or gen:<kind>:<seed> (default: the shipped workload)")
        p.add_argument("--capacity", type=int, help="cache capacity in blocks (kv)")
        p.add_argument("--sandbox", default="auto", choices=BACKENDS)
        p.add_argument("--workers", type=int, default=2, help="candidate jobs run side by side")

    s = sub.add_parser("search", help="search for a better heuristic")
    common(s)
    workload(s)
    s.add_argument("--budget", type=int, default=300, help="candidates to propose")
    s.add_argument("--time-budget", type=float, default=None, help="stop (resumably) after this many seconds")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--trials", type=int, default=8, help="Optuna trials per candidate")
    s.add_argument("--proposer", default="evolve", choices=("evolve",))
    s.add_argument("--resume", metavar="RUN", help="resume a stopped or killed run")

    b = sub.add_parser("baselines", help="evaluate the target's baselines on a workload")
    common(b)
    workload(b)

    e = sub.add_parser("eval", help="evaluate a heuristic file on a workload")
    common(e)
    workload(e)
    e.add_argument("file")
    e.add_argument("--tune", action="store_true", help="tune PARAMS again on this workload")
    e.add_argument("--trials", type=int, default=16)
    e.add_argument("--seed", type=int, default=0)

    v = sub.add_parser(
        "verify", help="prove a heuristic file's properties with Z3 (exit 1 if a hard one fails)"
    )
    v.add_argument("file")
    v.add_argument("--target", default="kv", choices=targets.names())
    v.add_argument("--seconds", type=float, default=2.0, help="Z3's time limit per property")
    v.add_argument("--json", action="store_true", help="machine-readable result on stdout")

    r = sub.add_parser("runs", help="inspect stored runs")
    rsub = r.add_subparsers(dest="runs_command", required=True)
    common(rsub.add_parser("list", help="all runs"))
    show = rsub.add_parser("show", help="one run")
    common(show)
    show.add_argument("run")
    best = rsub.add_parser("best", help="write the best heuristic of a run as a self-contained file")
    common(best)
    best.add_argument("run")
    best.add_argument("--output", "-o", help="file to write (default: stdout)")
    kernel_commands.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        handler = {
            "search": _search,
            "baselines": _baselines,
            "eval": _eval,
            "runs": _runs,
            "verify": _verify,
            "profile": kernel_commands.profile,
            "validate": kernel_commands.validate,
        }[args.command]
        handler(args)
    except (UserError, WorkloadError, StoreError, StaticError, SandboxUnavailable) as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        _fail("interrupted", code=130)
    except OSError as exc:
        _fail(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc), code=1)


def _store(args: argparse.Namespace) -> Store:
    return Store(open_engine(args.db))


def _target_config(target: Target, args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The workload and configuration from the flags, falling back to the target's shipped defaults."""
    defaults = target.default_config()
    workload = args.workload or defaults.pop("workload")
    defaults.pop("workload", None)
    if args.capacity is not None:
        defaults["capacity"] = args.capacity
    return workload, defaults


def _sandbox(args: argparse.Namespace) -> Sandbox:
    sandbox, reason = choose_sandbox(args.sandbox)
    _err.print(f"sandbox: {sandbox.name} ({reason})", markup=False, highlight=False)
    return sandbox


def _proposer(name: str) -> Proposer:
    proposers: dict[str, type[Proposer]] = {"evolve": EvolveProposer}
    return proposers[name]()


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
    store = _store(args)
    if args.resume:
        run = store.run(args.resume)
        if run is None:
            raise UserError(f"no run {args.resume!r} in {args.db}")
        if run.status == "finished":
            _err.print(f"run {run.id} is already finished", markup=False)
    else:
        target = targets.load(args.target)
        workload, config = _target_config(target, args)
        target.instances(workload, config)  # validate before anything is stored
        run_config = RunConfig(
            target=args.target,
            workload=workload,
            target_config=config,
            budget=args.budget,
            seed=args.seed,
            trials=args.trials,
            workers=args.workers,
            proposer=args.proposer,
            time_budget_s=args.time_budget,
        )
        run = store.create_run(args.target, run_config.to_json())
    config = RunConfig.from_json(json.loads(run.config))
    sandbox = _sandbox(args)
    reporter = _Progress(_err)
    search = Search(store, run, sandbox, _proposer(config.proposer), reporter)
    try:
        summary = search.execute()
    except KeyboardInterrupt:
        store.set_run_status(run.id, "stopped", "interrupted")
        reporter.stop()
        _fail(f"interrupted; resume with: crucible search --resume {run.id} --db {args.db}", code=130)
    finally:
        reporter.stop()
    _print_summary(summary, search.target, args.json)


def _print_summary(summary: Summary, target: Target, as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary.to_json(), indent=2, sort_keys=True))
        return
    rows: dict[str, dict[str, float]] = {}
    if summary.best:
        rows[f"found #{summary.best['candidate_id']}"] = summary.best["metrics"]
    rows.update(summary.baselines)
    console = Console()
    console.print(_table(f"run {summary.run_id} ({summary.status})", rows, target))
    if summary.best:
        console.print(
            f"best heuristic: crucible runs best {summary.run_id} --output best.py", highlight=False
        )


def _table(title: str, rows: dict[str, dict[str, float]], target: Target) -> Table:
    metric = target.objective.metric
    maximize = target.objective.direction == "maximize"
    table = Table(title=title)
    table.add_column("policy")
    columns = target.report_metrics
    for name in columns:
        table.add_column(name, justify="right")
    ordered = sorted(rows.items(), key=lambda kv: kv[1].get(metric, 0.0), reverse=maximize)
    for name, metrics in ordered:
        table.add_row(name, *(f"{metrics[c]:.4f}" if c in metrics else "-" for c in columns))
    return table


def _baselines(args: argparse.Namespace) -> None:
    target = targets.load(args.target)
    workload, config = _target_config(target, args)
    instances = tuple(i for i in target.instances(workload, config) if i.role == "eval")
    sandbox = _sandbox(args)
    jobs = [Job(target.name, source, instances) for source in target.baselines().values()]
    jobs += [Job(target.name, "", instances, builtin=name) for name in target.builtin_baselines()]
    names = [*target.baselines(), *target.builtin_baselines()]
    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        results = list(pool.map(sandbox.run, jobs))
    table: dict[str, dict[str, float]] = {}
    for name, result in zip(names, results, strict=True):
        if result.status != "ok":
            raise UserError(f"baseline {name} failed: {result.message}")
        table[name] = result.instances[0].metrics
    if args.json:
        print(
            json.dumps({"workload": workload, "config": config, "baselines": table}, indent=2, sort_keys=True)
        )
    else:
        Console().print(_table(f"baselines on {instances[0].label}", table, target))


def _eval(args: argparse.Namespace) -> None:
    target = targets.load(args.target)
    path = Path(args.file)
    try:
        source = path.read_text()
    except OSError as exc:
        raise UserError(f"cannot read {args.file}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UserError(f"{args.file} is not a UTF-8 text file") from None
    try:
        program = check(source, target.signatures)
    except StaticError as exc:
        raise UserError(f"{args.file}: {exc}") from None
    workload, config = _target_config(target, args)
    instances = target.instances(workload, config)
    if not args.tune:
        instances = [i for i in instances if i.role == "eval"]
    tuning = Tuning(trials=args.trials, seed=args.seed) if args.tune else None
    result = _sandbox(args).run(
        Job(target.name, source, tuple(instances), params=program.defaults(), tuning=tuning)
    )
    if result.status != "ok":
        raise UserError(f"{args.file}: evaluation {result.status}: {result.message}")
    evals = [i for i in result.instances if i.role == "eval"]
    if args.json:
        out = {
            "file": str(path),
            "workload": workload,
            "config": config,
            "params": result.params,
            "metrics": evals[0].metrics if evals else {},
            "backend": result.backend,
        }
        print(json.dumps(out, indent=2, sort_keys=True))
        return
    Console().print(_table(f"{path.name} on {evals[0].label}", {path.stem: evals[0].metrics}, target))
    if result.params:
        Console().print(f"params: {json.dumps(result.params, sort_keys=True)}", highlight=False)


def _runs(args: argparse.Namespace) -> None:
    store = _store(args)
    if args.runs_command == "list":
        runs = store.runs()
        if args.json:
            print(json.dumps([_run_json(store, r.id) for r in runs], indent=2, sort_keys=True, default=str))
            return
        table = Table(title=f"runs in {args.db}")
        for col in ("run", "target", "status", "created", "candidates", "best"):
            table.add_column(col)
        for r in runs:
            info = _run_json(store, r.id)
            best = info["best"]["score"] if info["best"] else None
            table.add_row(
                r.id,
                r.target,
                r.status,
                f"{r.created_at:%Y-%m-%d %H:%M}",
                str(info["candidates"]),
                "-" if best is None else f"{best:.4f}",
            )
        Console().print(table)
        return
    run = store.run(args.run)
    if run is None:
        raise UserError(f"no run {args.run!r} in {args.db}")
    target = targets.load(run.target)
    summary = summarize(store, run.id, target.objective.direction == "maximize")
    if args.runs_command == "show":
        _show(store, run.id, summary, target, args.json)
        return
    if not summary.best:
        raise UserError(f"run {run.id} has no evaluated candidate yet")
    program = check(summary.best["source"], target.signatures)
    text = render(program, summary.best["params"]).rstrip("\n") + "\n"
    if args.output:
        Path(args.output).write_text(text)
        _err.print(f"wrote {args.output} (candidate #{summary.best['candidate_id']})", markup=False)
    else:
        sys.stdout.write(text)


def _run_json(store: Store, run_id: str) -> dict[str, Any]:
    run = store.run(run_id)
    assert run is not None
    target = targets.load(run.target)
    summary = summarize(store, run_id, target.objective.direction == "maximize")
    return {
        "run_id": run.id,
        "target": run.target,
        "status": run.status,
        "message": run.message,
        "created_at": run.created_at,
        "config": json.loads(run.config),
        "candidates": sum(summary.counts.values()),
        "counts": summary.counts,
        "best": {k: v for k, v in summary.best.items() if k != "source"} if summary.best else None,
        "baselines": summary.baselines,
    }


def _verify(args: argparse.Namespace) -> None:
    target = targets.load(args.target)
    if not args.seconds > 0:
        raise UserError(f"--seconds must be positive, got {args.seconds}")
    try:
        source = Path(args.file).read_text()
    except OSError as exc:
        raise UserError(f"cannot read {args.file}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UserError(f"{args.file} is not a UTF-8 text file") from None
    try:
        program = check(source, target.signatures)
    except StaticError as exc:
        raise UserError(f"{args.file}: {exc}") from None
    properties = {p.name: p for p in target.properties()}
    with Verifier(seconds=args.seconds) as verifier:
        outcomes = verifier.verify(program, domains(target), tuple(properties.values()))
    if args.json:
        rows = [
            {**asdict(o), "statement": properties[o.property].statement, "kind": properties[o.property].kind}
            for o in outcomes
        ]
        print(json.dumps({"file": args.file, "target": target.name, "properties": rows}, indent=2))
    else:
        table = Table(title=f"{Path(args.file).name} on {target.name}")
        for column in ("property", "severity", "verdict", "seconds", "statement"):
            table.add_column(column, justify="right" if column == "seconds" else "left")
        for o in outcomes:
            statement = properties[o.property].statement
            table.add_row(o.property, o.severity, o.verdict, f"{o.seconds:.3f}", statement)
        console = Console()
        console.print(table)
        for o in outcomes:  # whole lines, so a counterexample can be copied
            if o.message:
                console.print(f"{o.property} ({o.verdict}): {o.message}", soft_wrap=True, highlight=False)
    if any(o.rejects for o in outcomes):
        raise SystemExit(1)


def _verification_counts(store: Store, run_id: str) -> dict[str, Any]:
    """Verdicts per property, the hard property that rejected each candidate, and the time per candidate."""
    rejected = {row.id for row in store.candidates(run_id) if row.status == "rejected"}
    verdicts: dict[str, dict[str, int]] = {}
    first: dict[int, str] = {}
    seconds: dict[int, float] = {}
    for v in store.verifications(run_id):
        counts = verdicts.setdefault(v.property, {})
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
        if v.candidate_id is not None:
            seconds[v.candidate_id] = seconds.get(v.candidate_id, 0.0) + v.seconds
            if v.candidate_id in rejected and v.severity == "hard" and v.verdict == "counterexample":
                first.setdefault(v.candidate_id, v.property)
    by_property: dict[str, int] = {}
    for name in first.values():
        by_property[name] = by_property.get(name, 0) + 1
    return {
        "verdicts": verdicts,
        "rejected_by_property": by_property,
        "median_seconds_per_candidate": statistics.median(seconds.values()) if seconds else None,
    }


def _show(store: Store, run_id: str, summary: Summary, target: Target, as_json: bool) -> None:
    rows = store.candidates(run_id)
    rejected: dict[str, int] = {}
    for row in rows:
        if row.status not in ("evaluated", "gated", "pending") and row.proposer != BASELINE:
            reason = row.message.split(":")[0] if row.message else row.status
            rejected[f"{row.status}: {reason}"] = rejected.get(f"{row.status}: {reason}", 0) + 1
    info = _run_json(store, run_id)
    info["rejected"] = rejected
    info["verification"] = _verification_counts(store, run_id)
    if as_json:
        print(json.dumps(info, indent=2, sort_keys=True, default=str))
        return
    console = Console()
    console.print(f"run {run_id}: {info['status']} {info['message']}", highlight=False)
    console.print(f"config: {json.dumps(info['config'], sort_keys=True)}", highlight=False)
    console.print(f"candidates: {json.dumps(summary.counts, sort_keys=True)}", highlight=False)
    if rejected:
        console.print(f"not evaluated, by reason: {json.dumps(rejected, sort_keys=True)}", highlight=False)
    refuted = info["verification"]["rejected_by_property"]
    if refuted:
        console.print(f"rejected by property: {json.dumps(refuted, sort_keys=True)}", highlight=False)
    _print_summary(summary, target, as_json=False)


if __name__ == "__main__":
    main()
