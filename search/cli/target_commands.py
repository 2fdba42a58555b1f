"""`crucible TARGET COMMAND`: a target's own commands, with flags generated from their Options.

A target is loaded only when its name is the command asked for (or when the whole command line is built,
for the reference docs), so other commands start without importing any target."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from search.cli import parsing


def targets_with_commands(only: Iterable[str] | None = None) -> list[str]:
    """The targets (of `only`, when given) that declare commands of their own."""
    import targets

    names = targets.names() if only is None else [n for n in only if n in targets.names()]
    return [name for name in names if targets.load(name).commands()]


def is_target(word: str | None) -> bool:
    """Whether the word names an installed target (whose own commands it may then be)."""
    import targets

    return word in targets.names()


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_parser(sub: Any, target_name: str) -> None:
    """Register `TARGET COMMAND ...` for every command the target declares; a bool argument is a flag that
    may also be given a value (`--list`, `--list true`, `--list false`)."""
    import targets

    target = targets.load(target_name)
    t = parsing.add_command(sub, target_name, f"the {target_name} target's own commands")
    commands = t.add_subparsers(dest="target_command", required=True, metavar="COMMAND")
    for command in target.commands():
        c = commands.add_parser(command.name, help=command.doc, description=command.doc)
        for option in command.arguments:
            shown = f"{option.doc} ({option.allowed()}"
            shown += f"; default {option.default})" if option.default is not None else ")"
            if option.type == "bool":
                c.add_argument(
                    _flag(option.name),
                    dest=option.name,
                    nargs="?",
                    const="true",
                    metavar="true|false",
                    help=shown,
                )
            else:
                c.add_argument(_flag(option.name), dest=option.name, metavar=option.name.upper(), help=shown)
        if "json" not in {o.name for o in command.arguments}:
            parsing.add_json(c)
        c.set_defaults(handler=run, command_of=command)


def run(args: argparse.Namespace) -> None:
    """Parse the command's flags with its Options, run it, print a table or JSON."""
    from search.cli.render import columns_table, print_json, show

    command = args.command_of
    values = _values(command, args)
    result = command.run(values)
    if getattr(args, "json", False) and "json" not in values:
        print_json(result.data)
    else:
        show(columns_table(result.title, result.columns, result.rows))


def _values(command: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The checked values of the flags given, the defaults of the others; a missing required one fails."""
    from targets.base import OptionError

    values: dict[str, Any] = {}
    for option in command.arguments:
        given = getattr(args, option.name)
        if given is not None:
            values[option.name] = option.parse(given)
        elif option.required:
            raise OptionError(f"{args.command} {command.name} needs {_flag(option.name)} ({option.doc})")
        elif option.default is not None:
            values[option.name] = option.default
    return values
