"""`crucible baselines`, `eval` and `verify`: a target's baselines or one heuristic file on a workload, and
Z3 on a file or a stored candidate. Nothing here is stored."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from search.cli import parsing
from search.cli.parsing import add_db, add_json, add_workload

EVAL = (
    "Evaluate a heuristic file on a workload. Its properties are checked with Z3 first: a refuted hard "
    "property is a warning (the file is evaluated anyway, exit 0); `crucible verify` is the check that fails."
)


def add_parser(sub: Any, name: str, help_text: str) -> None:
    if name == "baselines":
        b = parsing.add_command(sub, name, help_text)
        add_json(b)
        add_db(b)
        add_workload(b)
        b.set_defaults(handler=baselines, option_flags=True)
    elif name == "eval":
        e = parsing.add_command(sub, name, help_text, description=EVAL)
        add_json(e)
        add_db(e)
        add_workload(e)
        e.add_argument("file", help="the heuristic file (a candidate module)")
        e.add_argument("--tune", action="store_true", help="tune PARAMS again on this workload's train part")
        e.add_argument("--trials", type=int, default=16, help="Optuna trials with --tune (default 16)")
        e.add_argument("--seed", type=int, default=0, help="seed of the tuning with --tune (default 0)")
        e.set_defaults(handler=evaluate, option_flags=True)
    else:
        v = parsing.add_command(sub, name, help_text)
        v.add_argument(
            "file",
            nargs="?",
            help="the heuristic file, or a baseline of the target by name (or --run and --candidate)",
        )
        v.add_argument(
            "--target", default="kv", metavar="TARGET", help="whose properties to prove (default kv)"
        )
        v.add_argument("--seconds", type=float, default=2.0, help="Z3's time limit per property (default 2)")
        v.add_argument(
            "--require",
            metavar="NAME=VALUE",
            help="prove these too, as a search run requires them (`crucible targets show TARGET` lists them; "
            "the target's default options fix what they assume); exit 1 unless proved",
        )
        add_json(v)
        add_db(v)
        v.add_argument("--run", help="verify a candidate of this stored run (with --candidate)")
        v.add_argument(
            "--candidate", type=int, metavar="N", help="the stored candidate #N (as `runs show` names it)"
        )
        v.set_defaults(handler=verify)


def _planned(args: argparse.Namespace) -> tuple[Any, Any]:
    from search.evaluation import plan
    from search.service import load_target
    from search.settings import target_options

    target = load_target(args.target)
    options = target_options(target, parsing.option_assignments(args, target))
    return target, plan(target, args.workload, options)


def _sandbox(args: argparse.Namespace) -> Any:
    from sandbox.choice import choose_sandbox, notice

    sandbox, reason = choose_sandbox(parsing.setting(args, "sandbox"))
    parsing.note(notice(sandbox, reason))
    return sandbox


def baselines(args: argparse.Namespace) -> None:
    from search.cli.render import metrics_table, print_json, show
    from search.evaluation import evaluate_baselines

    target, planned = _planned(args)
    table = evaluate_baselines(target, planned, _sandbox(args), parsing.setting(args, "workers"))
    if args.json:
        print_json(table.to_json())
    else:
        show(metrics_table(f"baselines on {table.instance}", table.baselines, target))


def evaluate(args: argparse.Namespace) -> None:
    from sandbox.job import Tuning
    from search.cli.render import metrics_table, print_json, show
    from search.errors import UserError
    from search.evaluation import evaluate_file, read_program

    target, planned = _planned(args)
    program = read_program(target, Path(args.file))
    if args.tune and args.trials < 1:
        raise UserError(f"--trials must be at least 1, got {args.trials}")
    tuning = Tuning(trials=args.trials, seed=args.seed) if args.tune else None
    done = evaluate_file(target, args.file, program, planned, _sandbox(args), tuning)
    for verdict in done.refuted:
        cex = json.dumps(verdict.counterexample, sort_keys=True) if verdict.counterexample else ""
        parsing.warn(
            f"{args.file} fails the hard property {verdict.property}: {verdict.message} {cex}".rstrip()
        )
    if args.json:
        print_json(done.to_json())
        return
    rows = {Path(args.file).stem: done.metrics}
    lines: list[Any] = [metrics_table(f"{Path(args.file).name} on {done.instance}", rows, target)]
    if args.tune and not program.params:
        lines.append(f"--tune: {args.file} has no PARAMS to tune; evaluated as written")
    elif args.tune:
        trained = ", ".join(i.label for i in planned.instances if i.role == "train")
        lines.append(
            f"tuned {len(program.params)} PARAMS over {args.trials} trials on {trained}, then scored:"
        )
        lines.append(f"params: {json.dumps(done.params, sort_keys=True)}")
    elif done.params:
        lines.append(f"params (as written): {json.dumps(done.params, sort_keys=True)}")
    show(*lines)


def verify(args: argparse.Namespace) -> None:
    from rich.table import Table

    from search.cli.render import print_json, show
    from search.errors import UserError
    from search.evaluation import checked, read_program
    from search.evaluation import verify as prove
    from search.service import load_target, open_service
    from targets.base import OptionError, required

    target = load_target(args.target)
    if not args.seconds > 0:
        raise UserError(f"--seconds must be positive, got {args.seconds}")
    if args.file and (args.run or args.candidate is not None):
        raise UserError("give a file, or --run and --candidate, not both")
    if args.file and not Path(args.file).exists() and args.file in target.baselines():
        name = args.file
        program = checked(target, target.baselines()[args.file], f"baseline {args.file}")
    elif args.file:
        if not Path(args.file).exists():
            known = ", ".join(target.baselines())
            raise UserError(f"{args.file}: neither a heuristic file nor a baseline of {target.name}: {known}")
        name = args.file
        program = read_program(target, Path(args.file))
    elif args.run and args.candidate is not None:
        read = open_service(args.db, create=False).read
        run = read.run(args.run)
        stored = read.candidate_by_seq(run.run_id, args.candidate)
        target = load_target(run.target)
        name = f"run {run.run_id} candidate {stored.label}"
        program = checked(target, stored.source, name)
    else:
        raise UserError("verify needs a file, or --run RUN and --candidate N")
    try:
        demanded = required(target, args.require, target.default_config())
    except OptionError as exc:
        raise UserError(str(exc)) from None
    outcomes = prove(target, program, args.seconds, demanded)
    properties = {p.name: p for p in (*target.properties(), *demanded)}
    if args.json:
        rows = [
            {**asdict(o), "statement": properties[o.property].statement, "kind": properties[o.property].kind}
            for o in outcomes
        ]
        print_json({"file": name, "target": target.name, "properties": rows})
    else:
        table = Table(title=f"{Path(name).name if args.file else name} on {target.name}")
        for column in ("property", "severity", "verdict", "seconds", "statement"):
            table.add_column(column, justify="right" if column == "seconds" else "left")
        for o in outcomes:
            table.add_row(
                o.property, o.severity, o.verdict, f"{o.seconds:.3f}", properties[o.property].statement
            )
        lines: list[Any] = [table]
        lines += [f"{o.property} ({o.verdict}): {o.message}" for o in outcomes if o.message]
        show(*lines)  # whole lines, so a counterexample can be copied
    names = {p.name for p in demanded}
    if any(o.rejects or (o.property in names and o.verdict != "proved") for o in outcomes):
        raise SystemExit(1)
