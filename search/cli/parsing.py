"""What every command's parser shares: one-line errors, the flags of the run settings (generated from
search/settings.py and the proposers' declarations), the workload flags, and a target's own option flags."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

from search.settings import BY_NAME, DEFAULT_STORE
from targets.base import Option, OptionError


def fail(message: str, code: int = 2) -> NoReturn:
    print(f"crucible: error: {' '.join(message.split())}", file=sys.stderr)
    raise SystemExit(code)


def warn(message: str) -> None:
    print(f"crucible: warning: {' '.join(message.split())}", file=sys.stderr)


def note(message: str) -> None:
    """A line of progress or advice on stderr, as it is (never wrapped: it may be a command to copy)."""
    print(message, file=sys.stderr, flush=True)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs keep their lines; each flag's help says its default where it has one."""


class Parser(argparse.ArgumentParser):
    """A mistake on the command line is one line and a pointer to --help, not the whole usage."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        fail(f"{message} (see {self.prog} --help)")


def add_command(sub: Any, name: str, help_text: str, **kwargs: Any) -> argparse.ArgumentParser:
    """A subcommand's parser, its help line also its description unless one is given."""
    kwargs.setdefault("description", help_text[0].upper() + help_text[1:] + ".")
    return sub.add_parser(name, help=help_text, formatter_class=HelpFormatter, **kwargs)  # type: ignore[no-any-return]


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")


def add_db(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--db", default=DEFAULT_STORE, help=f"store URL, SQLite or PostgreSQL (default {DEFAULT_STORE})"
    )


def _help(setting: Option) -> str:
    allowed = setting.allowed_values()
    shown = f"{setting.doc}; one of {', '.join(allowed)}" if allowed else setting.doc
    if setting.default not in (None, [], ()):
        shown += f" (default {setting.default})"
    return shown.replace("%", "%%")


def add_setting(p: Any, setting: Option) -> None:
    """The flag of one setting; its value stays None unless given, so a command can tell what was given."""
    kwargs: dict[str, Any] = {"dest": setting.name, "default": None, "help": _help(setting)}
    if setting.metavar:
        kwargs["metavar"] = setting.metavar
    elif setting.type != "bool":
        kwargs["metavar"] = setting.name.removesuffix("_s").upper()
    if setting.type == "list":
        kwargs["action"] = "append"
    p.add_argument(setting.switch, **kwargs)


def given(args: argparse.Namespace, settings: Iterable[Option]) -> dict[str, Any]:
    """The settings given on the command line, each parsed and checked (OptionError names the flag)."""
    found = {}
    for setting in settings:
        text = getattr(args, setting.name, None)
        if text is not None:
            found[setting.name] = setting.parse(text)
    return found


def setting(args: argparse.Namespace, name: str) -> Any:
    """A run setting's value on the command line, parsed, or its default where it was not given."""
    from search.errors import UserError

    declared = BY_NAME[name]
    text = getattr(args, name, None)
    try:
        return declared.default if text is None else declared.parse(text)
    except OptionError as exc:
        raise UserError(str(exc)) from None


def add_workload(p: argparse.ArgumentParser, *, settings: Sequence[str] = ("sandbox", "workers")) -> None:
    """--target, --workload and --set (a target's options; those a target marks as flags of their own may
    also be given as --NAME VALUE), and the run settings that apply to evaluating a workload."""
    p.add_argument("--target", default="kv", metavar="TARGET", help="the mechanism to work on (default kv)")
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
        dest="assignments",
        help="a target option; repeatable (`crucible targets show TARGET` lists them; an option the target "
        "marks as a flag, such as a cache's capacity, is also --NAME VALUE)",
    )
    for name in settings:
        add_setting(p, BY_NAME[name])


def option_assignments(args: argparse.Namespace, target: Any) -> list[str]:
    """The --set texts and the target's own option flags among the words the parser did not know
    (`--capacity 4000`, `--capacity=4000`); any other word is one line naming it."""
    from search.errors import UserError
    from search.settings import option_flags

    flags = option_flags(target)
    pairs = list(args.assignments)
    words = list(args.extra)
    while words:
        word = words.pop(0)
        flag, eq, value = word.partition("=")
        if flag not in flags:
            takes = f"; target {target.name} takes {', '.join(flags)}" if flags else ""
            raise UserError(f"unrecognized arguments: {' '.join([word, *words])}{takes} (see --help)")
        if not eq:
            if not words:
                raise UserError(f"{flag} needs a value")
            value = words.pop(0)
        pairs.append(f"{flags[flag].name}={value}")
    return pairs
