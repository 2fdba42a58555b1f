"""`crucible`: the entry point. Only the command asked for is imported and given its flags, so `--help`,
`--version` and a command's `--help` answer at once; every mistake a user can make is one line on stderr
and a non-zero exit (2 for a mistake in the input, 1 where something outside failed, 130 on Ctrl-C)."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

from search.cli.parsing import Parser, fail

COMMANDS: dict[str, tuple[str, str]] = {
    "search": ("search.cli.search", "search for a better heuristic (or resume a run)"),
    "baselines": ("search.cli.evaluate", "evaluate the target's baselines on a workload"),
    "eval": ("search.cli.evaluate", "evaluate a heuristic file on a workload"),
    "verify": ("search.cli.evaluate", "prove a heuristic's properties with Z3 (exit 1 if a hard one fails)"),
    "runs": ("search.cli.runs", "inspect, stop and export stored runs"),
    "targets": ("search.cli.targets", "the targets: their options, features, metrics and baselines"),
    "deployments": (
        "search.cli.deployments",
        "the GPU deployments LLM targets price on: memory, costs, sources",
    ),
    "profile": ("search.cli.kernels", "measure kernel times with PyTorch and fit the cost model"),
    "validate": ("search.cli.kernels", "rank policies in the simulator and in the real engine, side by side"),
    "sandbox": ("search.cli.sandbox", "build the Docker sandbox image; check which backends work here"),
    "ui": ("search.cli.ui", "open the web UI (Streamlit) on a store: watch, inspect, compare, launch"),
    "tune": ("search.cli.tune", "tune a policy's PARAMS and the mechanism's knobs with Optuna (no proposer)"),
    "ci": ("search.cli.ci", "re-check champions, gate regressions, search seeded with them, write reports"),
    "llm": ("search.cli.llm", "serve a local open-weights model for --proposer llm (llama.cpp, no key)"),
    "export": (
        "search.cli.export",
        "write a heuristic file as a module an inference engine loads (SGLang, vLLM)",
    ),
}
"""Each command: the module that defines it (`add_parser(sub, name, help)`) and its one-line help."""
TARGET_COMMANDS = "search.cli.target_commands"


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("crucible")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


class _Version(argparse.Action):
    """`--version`, read from the installed metadata only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> NoReturn:
        print(f"crucible {version()}")
        parser.exit()


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; only `chosen` gets its flags (None: every command, as the reference docs
    need), the others a line of help."""
    parser = Parser(
        prog="crucible",
        description="Synthesize and autotune systems heuristics: search, evaluate, verify, inspect runs.",
        epilog="a target's own commands: crucible TARGET COMMAND (e.g. crucible targets show TARGET lists "
        "them)",
    )
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        if chosen is None or chosen == name:
            importlib.import_module(module).add_parser(sub, name, help_text)
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    commands = importlib.import_module(TARGET_COMMANDS)
    unknown = bool(chosen) and chosen not in COMMANDS and not commands.is_target(chosen)
    # a word that names nothing gets argparse's list of every command, the targets' own groups with them
    for name in commands.targets_with_commands(only=None if chosen is None or unknown else {chosen}):
        commands.add_parser(sub, name)
    return parser


def _chosen(argv: Sequence[str]) -> str | None:
    """The command word of `argv` (the first that is no flag), or None."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    _honour_interrupts()
    try:
        parser = build_parser(_chosen(argv) or "")
        args, extra = parser.parse_known_args(argv)
        if extra and not getattr(args, "option_flags", False):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.extra = extra  # a target's own option flags, resolved once the command has loaded it
        args.handler(args)
    except KeyboardInterrupt:
        fail("interrupted", code=130)
    except BrokenPipeError:  # the reader left (`| head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush must not fail too
        sys.exit(141)  # 128 + SIGPIPE
    except Exception as exc:  # every error a user can cause is one line; any other is a bug, raised
        code = exit_code(exc)
        if code is None:
            raise
        if isinstance(exc, OSError) and exc.filename:
            fail(f"{exc.strerror or exc}: {exc.filename}", code)
        fail(str(exc), code)


def exit_code(exc: Exception) -> int | None:
    """The exit status of an error a user can cause (2: their input; 1: something outside failed), or
    None for a bug, which keeps its traceback. The classes load only once there is an error."""
    from sandbox.base import SandboxUnavailable
    from search.errors import UserError
    from search.proposers.base import ProposerUnavailable
    from targets import TargetUnavailable
    from targets.base import OptionError, WorkloadError
    from verifiers.static import StaticError

    if isinstance(exc, ProposerUnavailable | TargetUnavailable):
        return 1
    if isinstance(exc, UserError | WorkloadError | OptionError | StaticError | SandboxUnavailable):
        return 2
    if isinstance(exc, OSError):
        return 1
    return None


def _honour_interrupts() -> None:
    """A stop is a SIGINT (Ctrl-C, `runs stop`, the UI's Stop button), so take it even where this process
    began ignoring it, as a script's background job or a child of one does."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


if __name__ == "__main__":
    main()
