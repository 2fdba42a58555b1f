"""The `crucible` command line: search, baselines, eval, runs; results on stdout, progress on stderr."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
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
from verifiers.program import Program
from verifiers.smt import Verifier
from verifiers.static import StaticError, check, render

from . import kernel_commands, sandbox_commands, target_commands, ui_command
from .accounting import ProposerStats, proposer_stats
from .errors import UserError
from .loop import BASELINE, Reporter, RunConfig, Search, Summary, domains, summarize
from .proposers.base import Proposer, ProposerUnavailable
from .proposers.evolve import EvolveProposer
from .proposers.llm import DEFAULT_KEY_ENV, LLMConfig, LLMProposer, ModelChoice, Price, api_key
from .proposers.mix import MixProposer
from .store import DEFAULT_URL, Store, StoreError, open_engine

_err = Console(stderr=True)


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
    s.add_argument("--trials", type=int, default=32, help="Optuna trials per candidate")
    s.add_argument("--proposer", default="evolve", choices=("evolve", "llm", "mix"))
    s.add_argument("--resume", metavar="RUN", help="resume a stopped or killed run")
    s.add_argument("--max-cost-usd", type=float, help="stop (resumably) once proposals cost this much")
    s.add_argument("--max-tokens", type=int, help="stop (resumably) once proposals used this many tokens")
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
    sandbox_commands.add_parsers(sub)
    target_commands.add_parsers(sub)
    ui_command.add_parsers(sub)
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
            "sandbox": sandbox_commands.sandbox,
            **target_commands.handlers(),
            "ui": ui_command.ui,
        }[args.command]
        handler(args)
    except (UserError, WorkloadError, StoreError, StaticError, SandboxUnavailable) as exc:
        _fail(str(exc))
    except ProposerUnavailable as exc:
        _fail(str(exc), code=1)
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


def _proposer(config: RunConfig) -> Proposer:
    """The run's proposer; an LLM one reads its key from the environment, never from the store."""
    if config.proposer == "evolve":
        return EvolveProposer()
    try:
        settings = LLMConfig.from_json(config.llm)
        llm = LLMProposer(settings, api_key(settings, os.environ))
    except ValueError as exc:
        raise UserError(str(exc)) from None
    llm.check()
    return llm if config.proposer == "llm" else MixProposer(llm, EvolveProposer(), settings.share)


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


def _caps(args: argparse.Namespace) -> dict[str, Any]:
    """The caps given on the command line (a resume may raise them)."""
    for flag, value in (("--max-cost-usd", args.max_cost_usd), ("--max-tokens", args.max_tokens)):
        if value is not None and not value > 0:
            raise UserError(f"{flag} must be positive, got {value}")
    caps = {"max_cost_usd": args.max_cost_usd, "max_tokens": args.max_tokens}
    return {k: v for k, v in caps.items() if v is not None}


def _resumed(store: Store, run_id: str, args: argparse.Namespace) -> RunConfig:
    """The stored config with the caps and endpoint a resume may change, stored and logged if changed."""
    config = RunConfig.from_json(json.loads(store.run(run_id).config))  # type: ignore[union-attr]
    changes: dict[str, Any] = _caps(args)
    if args.base_url and config.llm:
        changes["llm"] = {**config.llm, "base_url": args.base_url}
    new = replace(config, **changes)
    if new != config:
        store.set_run_config(run_id, new.to_json())
        shown = {**_caps(args), **({"base_url": args.base_url} if "llm" in changes else {})}
        store.log(run_id, "config", f"resumed with {json.dumps(shown, sort_keys=True)}")
    return new


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
        proposer = _proposer(_resumed(store, run.id, args))
        run = store.run(run.id) or run  # the stored config as the resume changed it
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
            llm=_llm_settings(args),
            **_caps(args),
        )
        proposer = _proposer(run_config)  # no key, a bad template, no endpoint: fail before storing anything
        run = store.create_run(args.target, run_config.to_json())
    sandbox = _sandbox(args)
    reporter = _Progress(_err)
    search = Search(store, run, sandbox, proposer, reporter)
    resume = f"crucible search --resume {run.id} --db {args.db}"
    try:
        summary = search.execute()
    except KeyboardInterrupt:
        store.set_run_status(run.id, "stopped", "interrupted")
        reporter.stop()
        _fail(f"interrupted; resume with: {resume}", code=130)
    except ProposerUnavailable as exc:
        store.set_run_status(run.id, "stopped", str(exc))
        spent = {"proposer": exc.proposer, "model": exc.model, "tokens": exc.tokens, "cost_usd": exc.cost_usd}
        store.log(run.id, "stopped", str(exc), **spent)
        reporter.stop()
        _fail(f"{exc}; the run is stopped, resume with: {resume}", code=1)
    finally:
        reporter.stop()
    _print_summary(summary, search.target, args.json)
    stopped = store.run(run.id)
    if stopped is not None and stopped.status == "stopped":
        message = f"run {run.id} stopped: {stopped.message}; resume with: {resume}"
        _err.print(message, markup=False, highlight=False, soft_wrap=True)


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
    if summary.tokens or summary.cost_usd:
        console.print(f"proposals used {summary.tokens} tokens, ${summary.cost_usd:.4f}", highlight=False)
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


def _read_program(target: Target, path: Path) -> tuple[str, Program]:
    """A heuristic file's text and its checked program; UserError names the file and why not."""
    try:
        source = path.read_text()
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path} is not a UTF-8 text file") from None
    try:
        return source, check(source, target.signatures)
    except StaticError as exc:
        raise UserError(f"{path}: {exc}") from None


def _eval(args: argparse.Namespace) -> None:
    target = targets.load(args.target)
    path = Path(args.file)
    source, program = _read_program(target, path)
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
        "tokens": summary.tokens,
        "cost_usd": summary.cost_usd,
        "best": {k: v for k, v in summary.best.items() if k != "source"} if summary.best else None,
        "baselines": summary.baselines,
    }


def _verify(args: argparse.Namespace) -> None:
    target = targets.load(args.target)
    if not args.seconds > 0:
        raise UserError(f"--seconds must be positive, got {args.seconds}")
    _, program = _read_program(target, Path(args.file))
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
    stats = proposer_stats(store, run_id, target.objective.direction == "maximize")
    info["proposers"] = [s.to_json() for s in stats]
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
    if stats:
        console.print(_stats_table(stats))
    _print_summary(summary, target, as_json=False)


if __name__ == "__main__":
    main()
