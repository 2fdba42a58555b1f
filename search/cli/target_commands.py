"""`crucible <target> <command>`: every target's own commands, with flags generated from their Options."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

import targets
from targets.base import Command, CommandResult, Option, OptionError, WorkloadError


@functools.cache
def _commands() -> dict[str, dict[str, Command]]:
    """target name -> command name -> Command, for targets that declare commands (loaded once)."""
    found: dict[str, dict[str, Command]] = {}
    for name in targets.names():
        declared = getattr(targets.load(name), "commands", tuple)()  # a target may predate commands()
        if declared:
            found[name] = {c.name: c for c in declared}
    return found


def _flag(option: Option) -> str:
    return "--" + option.name.replace("_", "-")


def add_parsers(sub: Any) -> None:
    """Register `<target> <command>` on the CLI's subparsers for every target that has commands."""
    for target, commands in _commands().items():
        t = sub.add_parser(target, help=f"the {target} target's own commands")
        tsub = t.add_subparsers(dest="target_command", required=True)
        for command in commands.values():
            c = tsub.add_parser(command.name, help=command.doc, description=command.doc)
            for option in command.arguments:
                shown = f"{option.doc} ({option.allowed()}"
                shown += f"; default {option.default})" if option.default is not None else ")"
                if option.type == "bool":
                    c.add_argument(_flag(option), dest=option.name, action="store_true", help=shown)
                else:
                    metavar = option.name.upper()
                    c.add_argument(_flag(option), dest=option.name, metavar=metavar, help=shown)
            if "json" not in {o.name for o in command.arguments}:
                c.add_argument("--json", action="store_true", help="print the result's data as JSON")


def handlers() -> dict[str, Callable[[argparse.Namespace], None]]:
    """The CLI's dispatch entries: one per target that has commands; a non-zero status exits."""
    return {target: _dispatch for target in _commands()}


def _dispatch(args: argparse.Namespace) -> None:
    status = run(args)
    if status:
        raise SystemExit(status)


def run(args: argparse.Namespace) -> int:
    """Parse the command's flags with its Options, run it, print a table or JSON; 2 on a user's mistake."""
    command = _commands()[args.command][args.target_command]
    try:
        values = _values(command, args)
        result = command.run(values)
    except (OptionError, WorkloadError) as exc:
        print(f"crucible: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    if getattr(args, "json", False) and "json" not in values:
        print(json.dumps(result.data, indent=2, sort_keys=True))
    else:
        render(result)
    return 0


def _values(command: Command, args: argparse.Namespace) -> dict[str, Any]:
    """The checked values of the flags given, the defaults of the others; a missing required one fails."""
    values: dict[str, Any] = {}
    for option in command.arguments:
        given = getattr(args, option.name)
        if option.type == "bool":
            values[option.name] = bool(given) or bool(option.default)
        elif given is not None:
            values[option.name] = option.parse(given)
        elif option.required:
            raise OptionError(f"{args.command} {command.name} needs {_flag(option)} ({option.doc})")
        elif option.default is not None:
            values[option.name] = option.default
    return values


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def render(result: CommandResult) -> None:
    """The rows as a table; piped output is as wide as the table, never cut at 80 columns."""
    table = Table(title=result.title)
    for column in result.columns:
        table.add_column(column, overflow="fold")
    for row in result.rows:
        table.add_row(*(_cell(row.get(c, "")) for c in result.columns))
    console = Console()
    if not console.is_terminal:
        width = Console(width=100_000).measure(table).maximum
        console = Console(width=max(80, width))
    console.print(table)
