"""`crucible runs`: list the runs of a store, show one, stop one, and write its best candidate as a file."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from search.cli import export, parsing
from search.cli.parsing import add_db, add_json


def add_parser(sub: Any, name: str, help_text: str) -> None:
    r = parsing.add_command(sub, name, help_text)
    actions = r.add_subparsers(dest="action", required=True, metavar="ACTION")
    listed = actions.add_parser("list", help="every run of the store")
    shown = actions.add_parser("show", help="one run: its settings, where the budget went, its result")
    best = actions.add_parser("best", help="write the best candidate of a run as a self-contained file")
    stop = actions.add_parser("stop", help="stop a run resumably (its live search is interrupted)")
    for p in (listed, shown, best, stop):
        add_json(p)
        add_db(p)
    for p in (shown, best, stop):
        p.add_argument("run", help="the run's id (a unique prefix will do)")
    best.add_argument("--output", "-o", help="file to write (default: stdout); with --export, a folder")
    export.add_options(best, flag="--export")
    r.set_defaults(handler=run)


def run(args: argparse.Namespace) -> None:
    from search.cli.render import print_json, show
    from search.cli.report import runs_table, status, whole_run
    from search.service import load_target, open_service

    service = open_service(args.db, create=False)
    read = service.read
    if args.action == "list":
        runs = read.runs()
        if args.json:
            print_json([r.to_json() for r in runs])
        else:
            show(runs_table(runs, args.db))
    elif args.action == "stop":
        service.stop(args.run)
        info = read.run(args.run)
        if args.json:
            print_json(info.to_json())
        else:
            parsing.note(f"run {info.run_id}: {status(info, args.db)}")
    elif args.action == "show":
        report = read.report(args.run)
        if args.json:
            print_json(report.to_json())
        else:
            whole_run(report, load_target(report.run.target), args.db)
    else:
        _best(args, read)


def _best(args: argparse.Namespace, read: Any) -> None:
    from search.cli.render import print_json

    info = read.run(args.run)
    text = read.best_file(info.run_id)
    best = read.best(info.run_id)
    if args.engine:
        args.target = args.target or info.target
        export.write(text, f"run {info.run_id} (candidate {best.label})", info.run_id, args)
        return
    if args.json:
        print_json({**best.to_json(), "run_id": info.run_id, "file": text})
    elif args.output:
        Path(args.output).write_text(text)
        parsing.note(f"wrote {args.output} (candidate {best.label} of run {info.run_id})")
    else:
        print(text, end="")
